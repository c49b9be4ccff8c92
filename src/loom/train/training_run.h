// One call of train() (trainer.h): everything the training loop touches, for the duration of the
// run. Internal to train/. trainer.cpp holds the loop (set-up, resume, steps, epochs,
// checkpoints); training_run_reports.cpp what the run reports (log lines, evaluation, the
// advisor's input, the summary) and the autotuner's glue.
//
// Threading: one thread (the caller of train()).
#pragma once

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "loom/core/thread_cpu_time.h"
#include "loom/models/loss.h"
#include "loom/parallel/grad_sync.h"
#include "loom/parallel/layout_plan.h"
#include "loom/parallel/parallel_layout.h"
#include "loom/parallel/step_executor.h"
#include "loom/profile/flops.h"
#include "loom/profile/step_timer.h"
#include "loom/train/autotune_session.h"
#include "loom/train/checkpoint.h"
#include "loom/train/evaluate.h"
#include "loom/train/layout_factory.h"
#include "loom/train/metrics_log.h"
#include "loom/train/optimizer.h"
#include "loom/train/remote_worker_metrics.h"
#include "loom/train/server_metrics.h"
#include "loom/train/stall_watchdog.h"
#include "loom/train/step_telemetry.h"
#include "loom/train/train_data.h"
#include "loom/train/trainer.h"

namespace loom::train {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// The run observes its own steps (parallel::StepObserver): the executor reports phases, forward
// passes and losses to it. It holds one ParallelLayout and never asks which it is: the layout
// says what this rank trains and saves (the whole model, or its pipeline stages), runs the
// steps, and combines losses, evaluations and checkpoints over the ranks.
class TrainingRun : private parallel::StepObserver {
 public:
  TrainingRun(const Config& config, const TrainOptions& options, const LayoutFactory& layouts)
      : config_(config),
        options_(options),
        plan_(layouts.plan()),
        layouts_(layouts),
        start_(Clock::now()),
        cpu_seconds_at_start_(process_cpu_seconds()) {
    if (options.communicator) {
      rank_ = options.communicator->rank();
      world_ = options.communicator->world();
    }
    replicas_ = plan_.replicas;
    replica_ = plan_.replica;
    if (!leader()) config_.train.tensorboard = false;  // rank 0 writes the run's files
  }

  TrainSummary run();

 private:
  void set_up();
  void resume_if_asked();
  void train_epoch(int64_t epoch, int64_t first_step);
  double optimizer_step(int64_t epoch, int64_t step_in_epoch);
  void save_checkpoint();
  // After each step: whether SIGTERM asks to stop here. Ranks that step together agree (any
  // rank asked -> all stop), so that they stop at the same step and one checkpoint holds it.
  bool stop_requested();
  // The stall watchdog, told what this rank's waits are for.
  void start_watchdog();
  // Testing aids that act after a step: a rank killed or frozen (LOOM_FAULT_*_RANK_AFTER_STEP).
  void inject_step_faults();
  // Starts the layout's gradient exchange and step executor from the parameters as they stand.
  void start_layout();
  // The training loader's next batch at the current position.
  data::LoaderState loader_state() const;
  // What the advisor reads, for a run of `wall_seconds`.
  profile::RunProfile run_profile(double wall_seconds) const;
  void report_step(double loss);
  // Rank 0 writes the run's files and reports; the other ranks of a data-parallel run do not.
  bool leader() const { return rank_ == 0; }
  void write_metrics(const nlohmann::ordered_json& record) {
    if (metrics_) metrics_->write(record);
  }
  // StepObserver: the executor's phases go to the step accounting, the first forward pass is
  // counted for the FLOPs, and a non-finite loss stops the run.
  void enter(profile::Phase phase) override { telemetry_->enter(phase); }
  void forward_begins() override;
  void forward_ends(int64_t samples) override;
  void loss_computed(double value) override;
  // Bytes of the optimizer state this rank holds (its shard under ZeRO-1).
  int64_t optimizer_state_bytes() const;
  int64_t gradient_bytes() const;
  // Micro-batch k of the optimizer step at (epoch, step_in_epoch), fed to the model.
  parallel::MicroBatch micro_batch(int64_t epoch, int64_t step_in_epoch, int64_t k);
  // The test split's loss and accuracy, the result known to every rank: each evaluates its part
  // through the layout (its whole model, or its pipeline's stages) and the sums are combined.
  EvalResult evaluate_test();
  // The summary of the run, written to summary.json by rank 0.
  TrainSummary summarize();
  void start_autotune();
  // Tuning is over: the run goes on with the chosen settings.
  void finish_autotune();

  Config config_;
  TrainOptions options_;
  const parallel::LayoutPlan plan_;  // the layout and the step's shape, derived once
  const LayoutFactory& layouts_;
  Clock::time_point start_;

  TrainData data_;
  std::unique_ptr<models::Model> model_;
  std::unique_ptr<parallel::ParallelLayout> layout_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<data::Feeder> feeder_;
  std::unique_ptr<CheckpointStore> store_;
  std::unique_ptr<MetricsLog> metrics_;
  RunInfo info_;
  TrainPosition position_;
  int64_t steps_per_epoch_ = 0, total_steps_ = 0;
  int64_t last_saved_step_ = -1;
  std::string last_checkpoint_;
  int64_t stop_after_step_ = 0;
  int64_t committed_step_ = -1;  // of last_checkpoint_, on the rank that writes it
  // LOOM_FAULT_KILL_RANK_AFTER_STEP / LOOM_FAULT_FREEZE_RANK_AFTER_STEP on this rank (-1: none).
  int64_t kill_after_step_ = -1, freeze_after_step_ = -1;
  bool preempted_ = false;           // SIGTERM: the loop stopped after the current step
  int64_t checkpoint_failures_ = 0;  // saves that failed under checkpoint.on_error: warn
  std::unique_ptr<StallWatchdog> watchdog_;
  std::chrono::milliseconds slow_by_{0};  // LOOM_FAULT_SLOW_RANK on this rank

  // Throughput: steady state skips the first steps (allocator and oneDNN warm-up).
  int64_t warmup_steps_ = 0, steps_this_process_ = 0;
  double steady_seconds_ = 0.0;
  int64_t steady_samples_ = 0;
  // The window since the last log line.
  double window_loss_ = 0.0, window_seconds_ = 0.0;
  int64_t window_steps_ = 0, window_samples_ = 0;
  double epoch_loss_ = 0.0;
  int64_t epoch_steps_ = 0;
  double last_lr_ = 0.0;
  EvalResult last_eval_;
  int rank_ = 0, world_ = 1;  // among the training ranks
  int replicas_ = 1;          // data-parallel copies of the model (world / pipeline ranks)
  int replica_ = 0;           // which of them this rank belongs to
  std::unique_ptr<models::Loss> loss_;       // training: with label smoothing
  std::unique_ptr<models::Loss> eval_loss_;  // the test loss: plain cross-entropy
  // Gradient exchange summed over the steady-state steps.
  double comm_seconds_ = 0, comm_exposed_ = 0, comm_bytes_ = 0;
  double window_comm_seconds_ = 0, window_comm_exposed_ = 0;  // since the last log line
  std::int64_t window_staleness_ = -1;  // the most seen since then; -1: nothing pulled
  int64_t comm_steps_ = 0;
  std::unique_ptr<StepTelemetry> telemetry_;
  std::unique_ptr<RemoteWorkerMetrics> remote_metrics_;  // with data.remote.workers
  std::unique_ptr<ServerMetrics> server_metrics_;        // with parameter servers
  double forward_flops_per_sample_ = 0;
  bool flops_counted_ = false;
  std::optional<profile::FlopCounter> flop_counter_;  // around the run's first forward pass
  double cpu_seconds_at_start_ = 0;
  std::unique_ptr<AutotuneSession> autotune_;  // autotune.enabled
  std::string resumed_autotune_json_;          // the checkpoint's finished result, if any
};

}  // namespace loom::train
