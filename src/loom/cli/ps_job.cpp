#include "loom/cli/ps_job.h"

#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>

#include "loom/comm/make_communicator.h"
#include "loom/core/caching_allocator.h"
#include "loom/core/error.h"
#include "loom/core/log.h"
#include "loom/core/settings.h"
#include "loom/core/topology.h"
#include "loom/parallel/ps/param_server.h"
#include "loom/parallel/ps/ps_protocol.h"
#include "loom/parallel/ps/ps_server.h"
#include "loom/profile/trace_writer.h"
#include "loom/train/data_parallel_run.h"
#include "loom/train/server_optimizer.h"
#include "loom/train/step_telemetry.h"

namespace loom::cli {

PsJob join_ps_job(const Config& config, comm::Rendezvous& rendezvous) {
  PsJob job;
  job.roles.servers = static_cast<int>(config.parallel.ps.servers);
  job.roles.workers = rendezvous.world() - job.roles.servers;
  if (job.roles.workers < 1) {
    throw ConfigError("config key 'parallel.ps.servers': " + std::to_string(job.roles.servers) +
                      " servers leave no worker among the job's " +
                      std::to_string(rendezvous.world()) +
                      " ranks (start workers and servers: loom launch --nproc-per-node N "
                      "--servers K)");
  }
  job.job = parallel::ps::job_hash(rendezvous.job());
  std::vector<int> everyone(static_cast<size_t>(rendezvous.world()));
  for (int r = 0; r < rendezvous.world(); ++r) everyone[static_cast<size_t>(r)] = r;
  const auto hosts = rendezvous.exchange("loom/ps/host", host_name(), everyone);
  job.server_hosts.assign(hosts.begin() + job.roles.workers, hosts.end());
  return job;
}

comm::CommOptions comm_options(const Config& config) {
  comm::CommOptions options;
  options.timeout = std::chrono::milliseconds(static_cast<long>(config.comm.timeout_s * 1000));
  options.check_calls = config.comm.check_calls;
  return options;
}

std::unique_ptr<comm::Communicator> job_communicator(const Config& config,
                                                     std::shared_ptr<comm::Rendezvous> rendezvous) {
  return comm::make_communicator(config.comm.backend, std::move(rendezvous), comm_options(config));
}

namespace {

// The server's spans of the steps the workers trace (profile.trace_wait + trace_warmup on, for
// trace_active steps), on its own process track, closed once the workers are done.
parallel::ps::ServerHooks trace_hooks(const Config& config, const std::string& out_dir, int rank,
                                      int server) {
  if (!config.profile.trace || out_dir.empty()) return {};
  std::filesystem::create_directories(out_dir);
  auto trace = std::make_shared<std::unique_ptr<profile::TraceWriter>>(
      std::make_unique<profile::TraceWriter>(train::rank_trace_path(out_dir, rank), rank,
                                             "parameter server " + std::to_string(server)));
  (*trace)->name_thread("serving");
  const std::int64_t first = config.profile.trace_wait + config.profile.trace_warmup;
  const std::int64_t last = first + config.profile.trace_active;
  parallel::ps::ServerHooks hooks;
  hooks.on_span = [trace, first, last](const std::string& name, std::int64_t step, auto begin,
                                       auto end, const std::string& args) {
    if (*trace && step >= first && step < last) (*trace)->complete(name, "ps", begin, end, args);
  };
  hooks.on_workers_done = [trace] { trace->reset(); };
  return hooks;
}

}  // namespace

int serve_parameters(comm::Communicator& world, const PsJob& job, const Config& config,
                     const std::string& out_dir) {
  const int server = world.rank() - job.roles.workers;
  // A server receives and sums parts of the same sizes every step: with the caching allocator
  // their buffers are reused instead of page-faulted in afresh (on the 2-core test machine a
  // fresh 24 MB buffer costs 28 ms to touch, a reused one 0.6 ms).
  use_configured_allocator(config.runtime.allocator, detect_topology().memory_bytes);
  auto last_log = std::chrono::steady_clock::now();
  const std::int64_t kill_after =
      server == 0 ? setting_int("LOOM_FAULT_KILL_SERVER_AFTER_STEP") : 0;
  const auto on_step = [&](const parallel::ServerLoad& load) {
    if (load.steps == kill_after) std::raise(SIGKILL);  // a server lost mid-run
    const auto now = std::chrono::steady_clock::now();
    if (now - last_log < std::chrono::seconds(30)) return;
    last_log = now;
    LOOM_LOG(kInfo, "ps") << "server " << server << ": " << load.steps << " steps, "
                          << load.bytes_in / 1e6 << " MB in, " << load.bytes_out / 1e6
                          << " MB out, summing " << load.sum_seconds << " s";
  };
  parallel::ServerLoad load;
  const PsConfig& ps = config.parallel.ps;
  if (train::servers_hold_parameters(ps)) {
    parallel::ps::ParamServerOptions options;
    options.roles = job.roles;
    options.job = job.job;
    options.bounded = ps.mode != "async";  // sync with the optimizer here is SSP with s = 0
    options.staleness = ps.mode == "ssp" ? ps.staleness : 0;
    options.on_step = on_step;
    options.hooks = trace_hooks(config, out_dir, world.rank(), server);
    const auto update = ps.optimizer_on == "server" ? train::server_optimizer(config.optimizer)
                                                    : parallel::ps::add_deltas();
    load = parallel::ps::run_param_server(world, options, *update);
  } else {
    parallel::ps::PsServerOptions options;
    options.roles = job.roles;
    options.job = job.job;
    options.on_step = on_step;
    options.hooks = trace_hooks(config, out_dir, world.rank(), server);
    load = parallel::ps::run_server(world, options);
  }
  std::printf(
      "loom ps-server: server %d (rank %d of %d) served %lld steps of %d workers: %.1f MB in, "
      "%.1f MB out, %.2f s summing, %.2f s active, %.2f s busy (CPU)\n",
      server, world.rank(), world.world(), static_cast<long long>(load.steps), job.roles.workers,
      static_cast<double>(load.bytes_in) / 1e6, static_cast<double>(load.bytes_out) / 1e6,
      load.sum_seconds, load.active_seconds, load.busy_seconds);
  return 0;
}

}  // namespace loom::cli
