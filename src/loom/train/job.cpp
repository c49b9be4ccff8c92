#include "loom/train/job.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <tuple>

#include "loom/comm/make_communicator.h"
#include "loom/core/device.h"
#include "loom/core/error.h"
#include "loom/core/log.h"
#include "loom/core/termination.h"
#include "loom/parallel/ps/serving.h"
#include "loom/profile/trace_writer.h"
#include "loom/train/optimizer_on_servers.h"
#include "loom/train/stall_watchdog.h"
#include "loom/train/step_telemetry.h"

namespace loom::train {
namespace {

// The server's spans of the steps the workers trace (profile.trace_wait + trace_warmup on, for
// trace_active steps), on its own process track, closed once the workers are done.
parallel::ps::ServerHooks trace_hooks(const Config& config, const std::string& out_dir, int rank,
                                      int server) {
  if (!config.profile.trace || out_dir.empty()) return {};
  std::filesystem::create_directories(out_dir);
  auto trace = std::make_shared<std::unique_ptr<profile::TraceWriter>>(
      std::make_unique<profile::TraceWriter>(rank_trace_path(out_dir, rank), rank,
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

// Connects to the job's other ranks: the rendezvous, the job's communicator, and for parameter
// servers their description and the workers' own group.
void connect(Job& job, const Config& config) {
  job.rendezvous = comm::Rendezvous::connect(job.world, comm_options(config).timeout);
  if (!job.plan.servers) {
    job.communicator = comm::make_communicator(config.comm.backend, job.rendezvous,
                                               comm_options(config), job.device);
    return;
  }
  // The servers keep CPU tensors: what a worker on a GPU sends them, or they send it, travels
  // through host memory (the pushes and pulls are host copies of the parameters or gradients).
  job.communicator = comm::make_host_staged_communicator(config.comm.backend, job.rendezvous,
                                                         comm_options(config), job.device);
  job.ps = parallel::ps::describe_servers(*job.rendezvous, job.plan);
  if (job.plan.serves()) return;
  // The workers train as data-parallel ranks among themselves and send their gradients through
  // the whole job's communicator.
  std::vector<int> worker_ranks;
  for (int r = 0; r < job.plan.trainers; ++r) worker_ranks.push_back(r);
  job.workers =
      comm::make_group_communicator(config.comm.backend, job.rendezvous, worker_ranks, "ps-workers",
                                    job.communicator->options(), job.device);
}

// A tensor group sums activations several times a layer: its ranks belong on one host, whose
// shared memory carries those sums. Ranks fill hosts in order (loom launch --nproc-per-node, srun,
// mpirun), so a group spans hosts only when a host's rank count is not a multiple of T.
void warn_of_tensor_groups_across_hosts(const Job& job) {
  if (!job.plan.tensor || !job.rendezvous || job.world.rank != 0) return;
  const std::vector<int> spanning =
      job.plan.mesh.group_across_hosts(parallel::kTensorDim, job.rendezvous->host_of_rank());
  if (spanning.empty()) return;
  std::string ranks;
  for (int r : spanning) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  LOOM_LOG(kWarn, "layout") << "the tensor group of ranks " << ranks
                            << " spans hosts: its sums, several a layer, go over the network; "
                               "start a multiple of parallel.tensor ("
                            << job.plan.tensor->ranks << ") ranks on each host";
}

}  // namespace

comm::CommOptions comm_options(const Config& config) {
  comm::CommOptions options;
  options.timeout = std::chrono::milliseconds(static_cast<long>(config.comm.timeout_s * 1000));
  options.check_calls = config.comm.check_calls;
  return options;
}

Job::Job() = default;
Job::Job(Job&&) noexcept = default;
Job& Job::operator=(Job&&) noexcept = default;
Job::~Job() = default;

JobEntry enter_job(const Config& config, const comm::WorldInfo& world,
                   const JobEntryOptions& options) {
  JobEntry entry;
  Job& job = entry.job;
  job.world = world;
  job.backend = config.comm.backend;
  job.stall_timeout_s_ = config.train.stall_timeout_s;
  job.preempt_grace_s_ = config.train.preempt_grace_s;
  // Checked before anyone connects: a layout that cannot be fails on every rank alike.
  job.plan = parallel::plan_layout(config, world.world, world.rank);
  // A server (which keeps no model on a device) and a trainer on the CPU move CPU tensors only.
  if (!job.plan.serves()) {
    job.device = resolve_device(config.runtime.device, world.local_rank, "runtime.device");
  }
  if (world.world > 1) connect(job, config);
  warn_of_tensor_groups_across_hosts(job);
  if (!job.plan.serves()) return entry;
  // A server serves until its workers end, also after SIGTERM: preempted workers commit a
  // checkpoint that needs the server's state.
  catch_termination();
  if (options.before_serving) options.before_serving();
  comm::Communicator& everyone = *job.communicator;
  parallel::ps::ServingOptions serving;
  serving.servers = job.ps;
  serving.optimizer = run_optimizer(config.optimizer);
  serving.hooks =
      trace_hooks(config, options.out_dir, everyone.rank(), everyone.rank() - job.plan.trainers);
  entry.served = parallel::ps::serve_parameters(everyone, job.plan, config, serving);
  return entry;
}

int Job::ranks_on_host() const {
  if (!rendezvous) return 1;
  const int host = rendezvous->host_of_rank()[static_cast<size_t>(world.rank)];
  return static_cast<int>(rendezvous->ranks_on_host(host).size());
}

void Job::fill(TrainOptions& options) {
  options.ranks_on_host = ranks_on_host();
  options.local_rank = world.local_rank;
  options.groups.trainers = trainers();
  options.heartbeat_store = heartbeat_store(world);
  if (termination) options.termination = termination;
  if (!communicator) return;
  // The ranks of a host share its cores.
  options.topology.usable_cores = std::max(1, options.topology.usable_cores / world.local_world);
  options.groups.make_group = group_maker();
  if (plan.servers) {
    options.groups.ps_world = communicator.get();
    options.groups.ps = ps;
  }
}

void Job::check_trains(const Config& config) const {
  const parallel::LayoutPlan wanted = parallel::plan_layout(config, world.world, world.rank);
  // Data parallelism and pipelines build their groups as they go; the servers' part of the job
  // is made when it is joined, and the servers already serve as that configuration said.
  const auto servers_of = [](const parallel::LayoutPlan& p) {
    const parallel::ServerDim s = p.servers.value_or(parallel::ServerDim{0});
    return std::make_tuple(p.servers.has_value(), s.servers, s.mode, s.staleness,
                           s.optimizer_on_server);
  };
  if (servers_of(wanted) == servers_of(plan)) return;
  throw ConfigError("config key 'parallel.mode': rank " + std::to_string(world.rank) +
                        " joined its job as " + plan.describe() +
                        ", but this configuration lays the job out as " + wanted.describe() +
                        "; train with the configuration the job was joined with",
                    {{"key", "parallel.mode"},
                     {"rank", std::to_string(world.rank)},
                     {"joined", plan.describe()},
                     {"configured", wanted.describe()}});
}

c10::intrusive_ptr<c10d::Store> heartbeat_store(const comm::WorldInfo& world) {
  if (world.world < 2 && !world.store_served_by_launcher) return {};
  try {
    return comm::connect_store(world, std::chrono::seconds(5));
  } catch (const Error& e) {
    LOOM_LOG(kWarn, "train") << "rank " << world.rank
                             << ": no heartbeats for the stall watchdog: " << e.what();
    return {};
  }
}

comm::MakeGroup Job::group_maker() const {
  if (!communicator) return nullptr;
  return [backend = backend, rendezvous = rendezvous, group_options = communicator->options(),
          device = device](const std::vector<int>& ranks, const std::string& name) {
    return comm::make_group_communicator(backend, rendezvous, ranks, name, group_options, device);
  };
}

void Job::start_step_checks(std::int64_t step) {
  StallWatchdogOptions options;
  options.stall_timeout_s = stall_timeout_s_;
  options.rank = world.rank;
  options.world = plan.trainers;  // the training ranks (parameter servers publish no heartbeats)
  options.data_source = "the script's data";
  options.exchange = "the job's other ranks";
  options.store = heartbeat_store(world);
  options.termination = termination;
  options.preempt_grace_s = preempt_grace_s_;
  watchdog_ = std::make_unique<StallWatchdog>(std::move(options));
  watchdog_->begin_step(step);

  faults_ = StepFaults::for_rank(communicator ? communicator->rank() : 0, comm::restart_attempt());
}

bool Job::end_of_step(std::int64_t step) {
  if (!watchdog_) start_step_checks(step);
  faults_.strike_after(step);
  bool mine = termination && termination->load(std::memory_order_relaxed) != 0;
  mine = mine || faults_.stops_after(step);
  comm::Communicator* ranks = trainers();
  if (ranks && plan.lockstep()) {
    watchdog_->enter(Phase::kCommExposed);  // a wait for the other ranks, though between steps
    at::Tensor asked = at::full({1}, mine ? 1.0f : 0.0f);
    ranks->allreduce(asked, comm::ReduceOp::kSum)->wait(ranks->options().timeout);
    mine = asked.item<float>() > 0;
  }
  // The next step begins: the script's own phases are not known here.
  watchdog_->begin_step(step + 1);
  watchdog_->enter(Phase::kOther);
  return mine;
}

}  // namespace loom::train
