// The `loom` subcommands. Each file registers one on the app and returns the action to run when
// it was chosen; `run` returns the process exit code (0 ok, 1 runtime failure, 2 usage or
// configuration error).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace loom::cli {

struct Command {
  CLI::App* sub;  // the parsed subcommand
  std::function<int()> run;
};

Command add_train_command(CLI::App& app);
Command add_version_command(CLI::App& app);
Command add_config_command(CLI::App& app);
Command add_data_command(CLI::App& app);

}  // namespace loom::cli
