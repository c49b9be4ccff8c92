// The training loop for one process: data, model, optimizer, schedule, precision, evaluation,
// checkpoints and metrics. Progress goes to a TrainObserver (the CLI draws it); files go to
// the output directory: config.yaml, metrics.jsonl, summary.json, checkpoints/.
//
// Threading: run() uses the calling thread and sets LibTorch's intra-op thread count for the
// process. Not reentrant.
#pragma once

#include <algorithm>
#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

#include "loom/comm/communicator.h"
#include "loom/core/blas_library.h"
#include "loom/core/config.h"
#include "loom/core/topology.h"
#include "loom/data/batch_source.h"
#include "loom/data/remote/remote_worker_stats.h"
#include "loom/parallel/job_groups.h"
#include "loom/parallel/layout_plan.h"
#include "loom/parallel/parallel_layout.h"
#include "loom/profile/advisor.h"
#include "loom/profile/autotuner.h"
#include "loom/profile/step_timer.h"
#include "loom/train/best_checkpoint.h"
#include "loom/train/loss_scaler.h"
#include "loom/train/runtime_choice.h"

namespace loom::train {

struct RunInfo {
  std::string model;
  int64_t parameters = 0;
  RuntimeChoice runtime;
  std::string machine;  // topology description
  int64_t train_samples = 0, test_samples = 0;
  int64_t steps_per_epoch = 0, total_steps = 0, epochs = 0;
  int64_t tokens_per_sample = 0;   // a language model's window; 0 for images
  int64_t resumed_from_step = -1;  // -1: fresh start
  std::string out_dir;
  std::string layout;         // parallel::LayoutPlan::describe()
  std::string pipeline_plan;  // a pipeline run's plan, as `loom pipeline plan` prints it
};

struct StepReport {
  int64_t step = 0, total_steps = 0;  // optimizer steps completed / planned
  int64_t epoch = 0, epochs = 0;
  double loss = 0.0;  // mean over the steps since the last report line
  double learning_rate = 0.0;
  double samples_per_second = 0.0;  // recent throughput
  double tokens_per_second = 0.0;   // a language model's (0 for images)
  double elapsed_seconds = 0.0, eta_seconds = 0.0;
  bool log_line = false;  // every train.log_every steps and the last (every step in a shorter run)
};

struct EpochReport {
  int64_t epoch = 0, epochs = 0, step = 0;
  double train_loss = 0.0;
  // The steps train_loss averages: the epoch's, or, in the epoch a resume began inside, only
  // those since the resume (first_step > 0, the epoch's step it resumed at).
  int64_t train_loss_steps = 0, first_step = 0;
  bool evaluated = false;
  double test_loss = 0.0, test_accuracy = 0.0;
  double test_perplexity = 0.0;  // a language model's exp(test_loss); 0 for images
  double seconds = 0.0;
};

// The checkpoints a run committed, on the rank that writes them: the time each held training up
// (its gather and its write, or under checkpoint.async its copy and a wait for the previous
// one to commit) and the time it then took in the background (0 when written in the step).
struct CheckpointTimes {
  bool async = false;  // checkpoint.async
  int64_t committed = 0;
  double blocked_seconds = 0, max_blocked_seconds = 0;  // summed over them, and the longest
  double background_seconds = 0, max_background_seconds = 0;
  void add(double blocked, double background) {
    ++committed;
    blocked_seconds += blocked;
    background_seconds += background;
    max_blocked_seconds = std::max(max_blocked_seconds, blocked);
    max_background_seconds = std::max(max_background_seconds, background);
  }
};

// One restart of the job by `loom launch --max-restarts`: why the attempt before it ended, the
// step it had reached (as its heartbeats said; -1 when unknown) and the checkpoint step the next
// attempt went on from.
struct RestartRecord {
  std::string cause;
  int64_t failed_at_step = -1;
  int64_t resumed_from_step = -1;
  // At least 0: heartbeats may lag a step behind the last one done.
  int64_t lost_steps() const {
    return failed_at_step >= 0 && resumed_from_step >= 0
               ? std::max<int64_t>(0, failed_at_step - resumed_from_step)
               : -1;
  }
};

struct TrainSummary {
  std::string model;
  int64_t parameters = 0;
  int64_t epochs = 0, steps = 0, samples = 0;
  bool evaluated = false;  // test_* hold a result (there is a test split and train.eval is on)
  double test_accuracy = 0.0, test_loss = 0.0, final_train_loss = 0.0;
  double samples_per_second = 0.0;  // steady state: training steps only, after warm-up
  // A language model: tokens per sample (its window), and exp(test_loss); 0 for images.
  int64_t tokens_per_sample = 0;
  double test_perplexity = 0.0;
  double tokens_per_second() const { return samples_per_second * tokens_per_sample; }
  double wall_seconds = 0.0;
  double cpu_seconds = 0.0;  // of the whole process, over the run
  RuntimeChoice runtime;
  // fp16's loss scaler at the end: its scale, and the steps skipped for overflowing gradients
  // over the whole run; none without loss scaling.
  std::optional<LossScaleState> loss_scale;
  int64_t resumed_from_step = -1;
  std::string last_checkpoint;
  // SIGTERM stopped the run after step `steps`; `last_checkpoint` holds it when that checkpoint
  // was committed (preempted_checkpoint), and --resume goes on from there exactly.
  bool preempted = false;
  bool preempted_checkpoint = false;
  // checkpoint.keep_best: the kept checkpoint of the best evaluation (none before one).
  std::optional<BestCheckpoint> best_checkpoint;
  int64_t checkpoint_failures = 0;      // saves that failed under checkpoint.on_error: warn
  CheckpointTimes checkpoint_times;     // their times, blocked and in the background
  std::vector<RestartRecord> restarts;  // of this job before this attempt, oldest first
  std::string allocator;                // caching | system
  size_t peak_cached_bytes_in_use = 0;  // caching allocator: peak of blocks >= 64 KiB in use
  // A GPU run's device memory (its caching allocator's), peaks over the run; 0 on the CPU.
  int64_t device_peak_allocated_bytes = 0, device_peak_reserved_bytes = 0;
  // Bytes of the optimizer state this rank (rank 0) holds at the end: all of it, or its shard
  // under parallel.zero.
  int64_t optimizer_state_bytes = 0;
  // Bytes of the gradients this rank (rank 0) holds after the last step: the whole model's, or
  // its shards' under parallel.zero: 2 (ZeRO-1 holds both the full buckets and its shards).
  int64_t gradient_bytes = 0;
  // Bytes of the parameters this rank (rank 0) holds between steps: the whole model's, or its
  // shards' under parallel.zero: 3.
  int64_t parameter_bytes = 0;
  double allocator_hit_rate = 0.0;  // caching allocator: share of blocks served from cache
  data::LoaderStats data;           // the training loader's samples, bad samples, time
  int loader_threads = 0;
  // With data.remote.workers: each worker's record, and batches local threads built.
  std::vector<data::RemoteWorkerStats> remote_workers;
  int64_t remote_local_batches = 0;
  double remote_receive_cpu_seconds = 0;  // spent receiving and checking workers' batches
  int64_t sample_bytes = 0;               // of one sample as batches carry it (uint8 pixels)
  profile::StepTimes step_times;          // summed over the steady-state steps
  int64_t steady_steps = 0;
  // The same steps' phases on the device's clock (profile/device_step_timer.h); none on the CPU.
  std::optional<profile::StepTimes> device_step_times;
  int64_t device_steady_steps = 0;
  // A GPU's host synchronisations over the first steady steps (steps 0: not counted).
  profile::HostSyncs host_syncs;
  std::vector<profile::Finding> findings;  // the advisor's, most important first
  std::vector<profile::Finding> notices;   // said at the start (start_notices.h)
  // How the ranks shared the work: the layout's plan and its own report, and the gradient
  // exchange of the steady-state steps (where there is one).
  parallel::LayoutPlan plan;
  parallel::LayoutReport layout;
  int buckets = 0;
  double comm_bytes_per_step = 0;
  double comm_seconds_per_step = 0;  // exchanges in flight
  double comm_overlap = 0;           // share of that hidden behind backward
  // autotune.enabled: what the autotuner tried and chose, or why it did not run.
  std::optional<profile::AutotuneResult> autotune;
  bool autotune_resumed = false;  // the result came from the checkpoint resumed from
  std::string autotune_skipped;
  // Model FLOPs utilisation: training is taken as 3 forward passes. The forward pass's FLOPs
  // are counted on the first step, or come from the model's own formula (flops_basis says
  // which: a transformer's 6N + 12 L d T per token).
  double forward_flops_per_sample = 0;
  std::string flops_basis = "counted";
  double peak_flops_per_second = 0;  // calibrated with a matrix product in peak_dtype
  std::string peak_dtype;
  // The BLAS library LibTorch's fp32 matrix products ran on, and their rate on one rank.
  BlasLibrary blas;
  double fp32_matmul_flops_per_second = 0;
  double achieved_flops_per_second() const {
    return 3 * forward_flops_per_sample * samples_per_second;
  }
  double mfu() const {
    return peak_flops_per_second > 0 ? achieved_flops_per_second() / peak_flops_per_second : 0;
  }
};

class TrainObserver {
 public:
  virtual ~TrainObserver() = default;
  virtual void on_start(const RunInfo&) {}
  virtual void on_step(const StepReport&) {}
  virtual void on_epoch(const EpochReport&) {}
  virtual void on_checkpoint(const std::string& path) {}
};

struct TrainOptions {
  std::string out_dir;
  // The job's groups the run's layout is made over (Job::fill): the training ranks (null for one
  // process), the maker of groups among them, and parameter servers' part of the job. Rank 0 of
  // the training ranks writes the run directory; the others write only their traces there
  // (profile.trace), which rank 0 merges into trace.json and removes.
  parallel::JobGroups groups;
  bool resume = false;  // continue from out_dir/checkpoints (fresh if none)
  // SIGTERM's flag (catch_termination()); non-zero asks the run to finish its step, agree on it
  // with the other ranks, commit a checkpoint and return a summary marked preempted. Null: the
  // run is not told.
  const std::atomic<int>* termination = nullptr;
  // The job's store on a connection of its own with a short timeout, for the stall watchdog's
  // heartbeats; null for a process on its own.
  c10::intrusive_ptr<c10d::Store> heartbeat_store;
  // How this job was restarted before this attempt (LOOM_RESTARTS), for the summary.
  std::vector<RestartRecord> restarts;
  TrainObserver* observer = nullptr;  // not owned; may be null
  Topology topology;                  // what the process may run on
  // The job's ranks that share this host's cores, parameter servers included (Job::fill).
  int ranks_on_host = 1;
  // This rank's place among them (LOCAL_RANK): the GPU it takes under runtime.device cuda/auto.
  int local_rank = 0;
};

// Trains as configured. Throws ConfigError for a config that does not fit the data or model,
// DataError for missing data, and Error for a non-finite loss (naming the step; the last good
// checkpoint stays intact).
TrainSummary train(const Config& config, const TrainOptions& options);

}  // namespace loom::train
