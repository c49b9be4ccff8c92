// Entry point of the `loom` command, called by the front (front.cpp) once it has loaded this
// module: parses the command line, runs the chosen subcommand and turns errors into exit codes.
// This is the only place that decides them.
#include <chrono>
#include <csignal>
#include <cstdio>
#include <thread>

#include "loom/cli/commands.h"
#include "loom/cli/error_report.h"
#include "loom/cli/front.h"
#include "loom/cli/stop_signals.h"
#include "loom/core/durable_file.h"
#include "loom/core/error.h"
#include "loom/core/log.h"
#include "loom/core/settings.h"
#include "loom/data/transform_registry.h"

namespace loom::cli {

void add_set_option(CLI::App* sub, std::vector<std::string>& overrides) {
  // One key=value a --set: a word after it is the command's own (a configuration file), not
  // another override.
  sub->add_option("--set", overrides, "Override a key: --set train.epochs=5 (repeatable)")
      ->expected(1)
      ->allow_extra_args(false)
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

extern "C" __attribute__((visibility("default"))) int loom_cli_main(int argc, char** argv,
                                                                    const sigset_t* start_mask) {
  // The front holds SIGTERM, SIGINT and SIGHUP; each path below says what they do.
  loom::cli::set_start_signal_mask(*start_mask);
  // A peer that dies leaves its sockets closed: a write to one must fail with EPIPE, which the
  // transports turn into an error naming the peer, instead of SIGPIPE killing this process
  // without a word (Loom's sockets write with MSG_NOSIGNAL; libraries it loads may not).
  std::signal(SIGPIPE, SIG_IGN);
  // Lines reach a reader as they are printed, also through a pipe (`loom launch` relays each
  // rank's output line by line; a log collector reads a pipe too): C's default there would hold
  // them back until 4 KB.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  CLI::App app{"Loom: fast deep-learning training on LibTorch", "loom"};
  app.require_subcommand(1);
  app.failure_message(CLI::FailureMessage::help);
  // `loom --version` prints what `loom version` does, as other tools' --version flags do.
  app.set_version_flag(
      "--version", [] { return loom::cli::version_text(); },
      "Print the versions of Loom and LibTorch");
  const loom::cli::Command commands[] = {
      loom::cli::add_train_command(app),       loom::cli::add_config_command(app),
      loom::cli::add_data_command(app),        loom::cli::add_launch_command(app),
      loom::cli::add_bench_command(app),       loom::cli::add_plan_command(app),
      loom::cli::add_report_command(app),      loom::cli::add_pipeline_command(app),
      loom::cli::add_data_worker_command(app), loom::cli::add_ps_server_command(app),
      loom::cli::add_generate_command(app),    loom::cli::add_export_command(app),
      loom::cli::add_version_command(app)};

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    loom::cli::release_stop_signals();
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    loom::cli::release_stop_signals();
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    loom::cli::release_stop_signals();
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    loom::cli::release_stop_signals();
    app.exit(e);
    return 2;
  }

  try {
    loom::set_log_level(loom::parse_log_level(loom::setting("LOOM_LOG_LEVEL")));
  } catch (const loom::ConfigError& e) {
    loom::cli::release_stop_signals();
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
    // A command that does not handle the stop signals gets them as it would have without the
    // front's hold; one that was held acts now.
    if (!command.handles_stop_signals) loom::cli::release_stop_signals();
    try {
      return command.run();
    } catch (const loom::ConfigError& e) {
      // A job's ranks share the configuration and the world's shape that the plan reads: each
      // finds the same error, and rank 0 says it for all. The others wait a moment before they
      // say it: the launcher that sees rank 0 fail stops them (quietly) meanwhile, and an error
      // only this rank found is still said.
      const bool rank_of_a_job = name == "train" || name == "ps-server";
      loom::cli::report_error(name, 2, e);
      if (rank_of_a_job && loom::cli::rank_from_environment() != 0) {
        std::this_thread::sleep_for(std::chrono::seconds(3));
      }
      std::fprintf(stderr, "loom %s: configuration error: %s\n", name.c_str(), e.what());
      return 2;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "loom %s: error: %s\n", name.c_str(), e.what());
      loom::cli::report_error(name, 1, e);
      return 1;
    }
  }
  loom::cli::release_stop_signals();
  return 2;
}
