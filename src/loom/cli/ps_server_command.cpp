// `loom ps-server [CONFIG.yaml ...] [--set key=value ...]`: one parameter server of a job
// started with parallel.mode: ps, for hosts that only serve. It takes a trainer's arguments
// (only comm.* and parallel.ps.* matter to it), so `loom launch --servers K` starts servers with
// the very command line its workers get.
#include "loom/cli/commands.h"
#include "loom/cli/ps_job.h"
#include "loom/cli/stop_signals.h"
#include "loom/comm/world_info.h"
#include "loom/core/config.h"
#include "loom/core/error.h"
#include "loom/core/termination.h"
#include "loom/train/job.h"

namespace loom::cli {
namespace {

struct PsServerArgs {
  std::vector<std::string> config_paths;
  std::vector<std::string> overrides;
  std::string out_dir;
  bool trace = false;
  bool ignored = false;
};

int run_ps_server(const PsServerArgs& args) {
  // A server serves until its workers end, also after SIGTERM: preempted workers commit a
  // checkpoint that needs the server's state. SIGINT and SIGHUP end it at once, with 128 + N.
  // Installed before the front's hold ends, so that one held since the start acts as they say.
  end_on_stop_signals("ps-server");
  catch_termination();
  release_stop_signals();
  std::vector<std::string> overrides = args.overrides;
  if (args.trace) overrides.push_back("profile.trace=true");
  const Config config = load_run_config(args.config_paths, overrides);
  if (!config.parallel.parameter_servers()) {
    throw ConfigError(
        "config key 'parallel.mode': loom ps-server serves runs with parallel.mode "
        "ps, this configuration says '" +
        config.parallel.mode + "'");
  }
  const comm::WorldInfo world = comm::world_from_environment();
  if (world.world < 2) {
    throw ConfigError(
        "loom ps-server: started as the only rank; start it with its workers (loom launch "
        "--servers K, or RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT as for loom train)");
  }
  const train::JobEntry entry = enter_job_of_command(config, world, args.out_dir);
  if (!entry.served) {
    throw ConfigError("config key 'parallel.ps.servers': loom ps-server runs as rank " +
                      std::to_string(world.rank) + " of " + std::to_string(world.world) +
                      ", but with " +
                      std::to_string(entry.job.plan.servers ? entry.job.plan.servers->servers : 0) +
                      " server(s) only the last ranks serve; set it to the number of servers "
                      "started (loom launch --servers K sets it for its ranks)");
  }
  return report_serving(entry.job, *entry.served);
}

}  // namespace

Command add_ps_server_command(CLI::App& app) {
  auto args = std::make_shared<PsServerArgs>();
  CLI::App* sub =
      app.add_subcommand("ps-server",
                         "Serve as a parameter server of a parallel.mode=ps job (the last "
                         "parallel.ps.servers ranks); takes the trainers' arguments");
  sub->add_option("config", args->config_paths, "The trainers' YAML configuration files");
  add_set_option(sub, args->overrides);
  // A trainer's other options, accepted so that the same command line starts either.
  sub->add_option("--out", args->out_dir,
                  "The run's directory: with --trace this server's spans go there for worker 0 "
                  "to merge into trace.json (the workers write the rest)");
  sub->add_flag("--trace", args->trace, "Trace this server's work as the trainers trace theirs");
  sub->add_flag("--resume,--autotune", args->ignored, "Ignored (trainer options)");
  return {sub, [args] { return run_ps_server(*args); }, /*handles_stop_signals=*/true};
}

}  // namespace loom::cli
