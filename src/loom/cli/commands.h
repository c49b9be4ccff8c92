// The `loom` subcommands. Each file registers one on the app and returns the action to run when
// it was chosen; `run` returns the process exit code (0 ok, 1 runtime failure, 2 usage or
// configuration error).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

#include "loom/core/config.h"

namespace loom::cli {

struct Command {
  CLI::App* sub;  // the parsed subcommand
  std::function<int()> run;
  // Whether `run` says what SIGTERM, SIGINT and SIGHUP do (cli/stop_signals.h); for the other
  // commands main() releases them before `run`.
  bool handles_stop_signals = false;
};

// The repeatable `--set key=value` option that every configured subcommand takes.
void add_set_option(CLI::App* sub, std::vector<std::string>& overrides);

// The configuration files in order plus the --set overrides (core's load_config), with the
// transform lists checked and completed by the data layer's registry. Throws ConfigError.
Config load_run_config(const std::vector<std::string>& paths,
                       const std::vector<std::string>& overrides);

// The whole of a file the user named; a ConfigError naming `option` when it cannot be read.
std::string read_user_file(const std::string& path, const std::string& option);

Command add_train_command(CLI::App& app);
Command add_version_command(CLI::App& app);
// What `loom version` prints (two lines, no final newline), for `loom --version` too.
std::string version_text();
Command add_config_command(CLI::App& app);
Command add_data_command(CLI::App& app);
Command add_data_worker_command(CLI::App& app);
Command add_ps_server_command(CLI::App& app);
Command add_launch_command(CLI::App& app);
Command add_bench_command(CLI::App& app);
Command add_plan_command(CLI::App& app);
Command add_pipeline_command(CLI::App& app);
Command add_report_command(CLI::App& app);
Command add_generate_command(CLI::App& app);
Command add_export_command(CLI::App& app);
// `loom bench pipeline`, registered under `bench`.
Command add_bench_pipeline_command(CLI::App& bench);
// `loom bench ps`, registered under `bench`.
Command add_bench_ps_command(CLI::App& bench);
// `loom bench kernels`, registered under `bench`.
Command add_bench_kernels_command(CLI::App& bench);
// `loom data inspect`, registered under `data`.
Command add_data_inspect_command(CLI::App& data);
// `loom data tokenize`, registered under `data`.
Command add_data_tokenize_command(CLI::App& data);

}  // namespace loom::cli
