// Joining the job a process is one rank of (loom launch, torchrun, Slurm or Open MPI variables):
// the rendezvous, the job's communicator, its layout plan, and for a parameter-server job which
// ranks serve and the workers' own group. `loom train`, `loom ps-server`, the Python package and
// an embedding program all join here, so any of them gets data parallelism, pipelines and
// parameter servers alike.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "loom/comm/communicator.h"
#include "loom/comm/rendezvous.h"
#include "loom/comm/world_info.h"
#include "loom/core/config.h"
#include "loom/parallel/grad_sync.h"
#include "loom/parallel/layout_plan.h"
#include "loom/parallel/ps/ps_bucket_exchange.h"
#include "loom/train/trainer.h"

namespace loom::train {

class StallWatchdog;

// comm.timeout_s and comm.check_calls as the communicators' options.
comm::CommOptions comm_options(const Config& config);

struct Job {
  comm::WorldInfo world;
  std::string backend;        // comm.backend, for groups
  parallel::LayoutPlan plan;  // this rank's
  std::shared_ptr<comm::Rendezvous> rendezvous;
  std::unique_ptr<comm::Communicator> communicator;  // every rank, servers included
  std::unique_ptr<comm::Communicator> workers;       // parameter servers: the training ranks
  // Parameter servers: who serves, the job's hash and the servers' hosts.
  parallel::ps::PsExchangeOptions ps;

  // The communicator of the ranks that train (the workers of a parameter-server job); null for
  // a job of one process.
  comm::Communicator* trainers() { return workers ? workers.get() : communicator.get(); }
  // The job's ranks on this rank's host, parameter servers included, as the rendezvous found
  // them (by host identity, not LOCAL_WORLD_SIZE); 1 for a job of one process.
  int ranks_on_host() const;
  // Hands the communicators, the servers' description and the ranks on this host to a run of
  // train() (the communicators stay owned here, so the Job must outlive the run).
  void fill(TrainOptions& options);
  // Builds a communicator over some of the job's ranks (ascending; group rank i is ranks[i]);
  // every member calls it with the same ranks and name. Null for a job of one process.
  using MakeGroup = std::function<std::unique_ptr<comm::Communicator>(const std::vector<int>& ranks,
                                                                      const std::string& name)>;
  MakeGroup group_maker() const;

  // A script's own loop (loom.distributed), after its step `step` (the steps done): strikes
  // with the testing aids meant for that step (LOOM_FAULT_KILL_RANK_AFTER_STEP in a job's first
  // attempt, LOOM_FAULT_STOP_AFTER_STEP), and says whether the job stops here, as `loom train`
  // stops on SIGTERM: true on every rank that steps with this one once any of them has caught
  // it (`termination` set, catch_termination()). Collective over the training ranks that step
  // together (all but async and SSP parameter-server workers, which decide alone).
  // From its first call it also keeps a stall watchdog (train.stall_timeout_s of the joining
  // configuration; its calls are the signs of life) and publishes this rank's heartbeats for
  // `loom launch`, as `loom train` does.
  bool end_of_step(std::int64_t step);
  const std::atomic<int>* termination = nullptr;  // SIGTERM's flag, once caught

  Job();
  Job(Job&&) noexcept;
  Job& operator=(Job&&) noexcept;
  ~Job();

 private:
  // At the first end_of_step: the watchdog starts, and the testing aids are read once.
  void start_step_checks(std::int64_t step);
  double stall_timeout_s_ = 0, preempt_grace_s_ = 30;  // train.*, from join_job
  std::unique_ptr<StallWatchdog> watchdog_;            // from the first end_of_step
  // This rank's testing aids: the step after which it is killed (first attempt only) or frozen,
  // and the step after which every rank stops as if preempted; -1 or 0: never.
  std::int64_t kill_after_ = -1, freeze_after_ = -1, stop_after_ = 0;
  friend Job join_job(const Config& config, const comm::WorldInfo& world);
};

// The stall watchdog's own connection to the job's store, for heartbeats; null for a process on
// its own, or (with a warning) when the store cannot be reached.
c10::intrusive_ptr<c10d::Store> heartbeat_store(const comm::WorldInfo& world);

// Joins the job as the configuration lays it out (collective over every rank; a job of one
// process connects to nothing). Throws ConfigError naming the key when the layout cannot be
// (parallel.ps.servers that leave no worker, ...), CommError or TimeoutError naming whom it
// waited for.
Job join_job(const Config& config, const comm::WorldInfo& world);

// Serves as this rank's parameter server (job.plan.serves()) until the workers stop, as
// parallel.ps.* says: summing gradients, or keeping the parameters (async, SSP, the optimizer
// on the servers); logs its load now and then. With profile.trace and an `out_dir` the server's
// spans of the traced steps go to its trace file there, which worker 0 merges into trace.json.
parallel::ServerLoad serve_parameters(Job& job, const Config& config, const std::string& out_dir);

}  // namespace loom::train
