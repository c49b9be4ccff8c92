// Joining the job a process is one rank of (loom launch, torchrun, Slurm or Open MPI variables):
// the rendezvous, the job's communicator, its layout plan, and for a parameter-server job which
// ranks serve and the workers' own group. `loom train`, `loom ps-server`, loom.train() and
// loom.distributed.init() in Python and an embedding program all enter here (enter_job), so
// any of them gets data parallelism, pipelines and parameter servers alike, and which ranks
// serve is decided in one place.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "loom/comm/communicator.h"
#include "loom/comm/rendezvous.h"
#include "loom/comm/world_info.h"
#include "loom/core/config.h"
#include "loom/parallel/grad_sync.h"
#include "loom/parallel/layout_plan.h"
#include "loom/parallel/ps/ps_bucket_exchange.h"
#include "loom/train/step_faults.h"
#include "loom/train/trainer.h"

namespace loom::train {

class StallWatchdog;
struct JobEntry;
struct JobEntryOptions;

// comm.timeout_s and comm.check_calls as the communicators' options.
comm::CommOptions comm_options(const Config& config);

struct Job {
  comm::WorldInfo world;
  std::string backend;  // comm.backend, for groups
  // runtime.device for this rank: the communicators move its tensors too (comm.backend's cuda:).
  c10::Device device = c10::kCPU;
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
  // Hands the communicators, the servers' description, the ranks on this host (and their share
  // of its cores), the store for heartbeats and SIGTERM's flag (when caught) to a run of train()
  // on a training rank (the communicators stay owned here, so the Job must outlive the run).
  void fill(TrainOptions& options);
  // Throws ConfigError naming parallel.mode when `config` lays the job out otherwise than the
  // configuration it was joined with (another mode, or another number of servers), so that a
  // run of train() in a job joined earlier (loom.distributed.init(), then loom.train()) cannot
  // wait for ranks that do something else.
  void check_trains(const Config& config) const;
  // Builds communicators over some of the job's ranks; null for a job of one process.
  comm::MakeGroup group_maker() const;

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
  double stall_timeout_s_ = 0, preempt_grace_s_ = 30;  // train.*, from enter_job
  std::unique_ptr<StallWatchdog> watchdog_;            // from the first end_of_step
  StepFaults faults_;  // this rank's testing aids (LOOM_FAULT_*), read at the first step
  friend JobEntry enter_job(const Config& config, const comm::WorldInfo& world,
                            const JobEntryOptions& options);
};

// The stall watchdog's own connection to the job's store, for heartbeats; null for a process on
// its own, or (with a warning) when the store cannot be reached.
c10::intrusive_ptr<c10d::Store> heartbeat_store(const comm::WorldInfo& world);

struct JobEntryOptions {
  // The run's directory: with profile.trace a server's spans of the traced steps go there.
  std::string out_dir;
  // Called on a serving rank just before it serves (the CLI names what the process is doing,
  // for the message of a stop signal that ends it).
  std::function<void()> before_serving;
};

// What a rank did on entering its job.
struct JobEntry {
  Job job;
  // A parameter server's load once its workers ended; empty on a rank that trains.
  std::optional<parallel::ServerLoad> served;
};

// The one entry of every program that runs a rank of a job: joins it (collective over every
// rank), and on a rank that serves (the last parallel.ps.servers ranks of a job with
// parameter servers) serves until the workers end and returns what it served. A server serves
// on after SIGTERM (caught here, core/termination.h): preempted workers commit a checkpoint that
// needs the server's state. A rank that trains gets the joined job at once, to train with
// (Job::fill) or to hand to a script's own loop; so does every process of a job of one (which
// connects to nothing). Throws ConfigError naming the key when the layout cannot be
// (parallel.ps.servers that leave no worker, ...), CommError or TimeoutError naming whom it
// waited for.
JobEntry enter_job(const Config& config, const comm::WorldInfo& world,
                   const JobEntryOptions& options);

}  // namespace loom::train
