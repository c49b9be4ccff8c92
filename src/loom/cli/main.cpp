// Entry point of the `loom` command: parses the command line, runs the chosen subcommand and
// turns errors into exit codes. This is the only place that decides them.
#include <csignal>
#include <cstdio>

#include "loom/cli/commands.h"
#include "loom/core/error.h"
#include "loom/core/log.h"
#include "loom/core/settings.h"
#include "loom/data/transform_registry.h"
#include "loom/core/durable_file.h"

namespace loom::cli {

void add_set_option(CLI::App* sub, std::vector<std::string>& overrides) {
  sub->add_option("--set", overrides, "Override a key: --set train.epochs=5 (repeatable)")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
}

Config load_run_config(const std::vector<std::string>& paths,
                       const std::vector<std::string>& overrides) {
  return data::complete_transforms(load_config(paths, overrides));
}

std::string read_user_file(const std::string& path, const std::string& option) {
  try {
    return read_file(path);
  } catch (const Error& e) {
    throw ConfigError(option + ": " + e.what());
  }
}

}  // namespace loom::cli

int main(int argc, char** argv) {
  // A peer that dies leaves its sockets closed: a write to one must fail with EPIPE, which the
  // transports turn into an error naming the peer, instead of SIGPIPE killing this process
  // without a word (Gloo does not always write with MSG_NOSIGNAL).
  std::signal(SIGPIPE, SIG_IGN);
  CLI::App app{"Loom: fast deep-learning training on LibTorch", "loom"};
  app.require_subcommand(1);
  app.failure_message(CLI::FailureMessage::help);
  const loom::cli::Command commands[] = {
      loom::cli::add_train_command(app),       loom::cli::add_config_command(app),
      loom::cli::add_data_command(app),        loom::cli::add_launch_command(app),
      loom::cli::add_bench_command(app),       loom::cli::add_plan_command(app),
      loom::cli::add_report_command(app),      loom::cli::add_pipeline_command(app),
      loom::cli::add_data_worker_command(app), loom::cli::add_ps_server_command(app),
      loom::cli::add_generate_command(app),    loom::cli::add_version_command(app)};

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;
  }

  try {
    loom::set_log_level(loom::parse_log_level(loom::setting("LOOM_LOG_LEVEL")));
  } catch (const loom::ConfigError& e) {
    std::fprintf(stderr, "loom: environment variable LOOM_LOG_LEVEL: %s\n", e.what());
    return 2;
  }

  for (const auto& command : commands) {
    CLI::App* sub = command.sub;
    if (!sub->parsed()) continue;
    // "pipeline plan" for a nested subcommand.
    const CLI::App* parent = sub->get_parent();
    const std::string name =
        parent && parent != &app ? parent->get_name() + " " + sub->get_name() : sub->get_name();
    try {
      return command.run();
    } catch (const loom::ConfigError& e) {
      std::fprintf(stderr, "loom %s: configuration error: %s\n", name.c_str(), e.what());
      return 2;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "loom %s: error: %s\n", name.c_str(), e.what());
      return 1;
    }
  }
  return 2;
}
