// One call of train() (trainer.h): the training loop and what it keeps for the duration of the
// run. Internal to train/. What the run is made of (data, model, layout, optimizer, losses,
// feeder) is built by build_run_parts (run_parts.h); its checkpoints are RunCheckpoints', its
// steps' accounting and files RunAccounting's, its autotuner RunAutotune's, its testing aids
// StepFaults'. trainer.cpp holds the loop (set-up, resume, steps, epochs, when to checkpoint and
// to stop); training_run_reports.cpp what the run reports (log lines, evaluation, the summary).
//
// Threading: one thread (the caller of train()).
#pragma once

#include <chrono>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "loom/parallel/layout_plan.h"
#include "loom/parallel/step_executor.h"
#include "loom/profile/flops.h"
#include "loom/train/evaluate.h"
#include "loom/train/layout_factory.h"
#include "loom/train/loss_scaler.h"
#include "loom/train/remote_worker_metrics.h"
#include "loom/train/run_accounting.h"
#include "loom/train/run_autotune.h"
#include "loom/train/run_checkpoints.h"
#include "loom/train/run_parts.h"
#include "loom/train/stall_watchdog.h"
#include "loom/train/step_faults.h"
#include "loom/train/trainer.h"

namespace loom::train {

using Clock = std::chrono::steady_clock;

// The run observes its own steps (parallel::StepObserver, handed to the layout's start()): the
// layout's step executor reports phases (to RunAccounting) and forward passes (the first is
// counted for the FLOPs). Each step's loss stays where it was computed until the run reads the
// steps' losses together (settle_losses: log lines, checkpoints, the end of an epoch), and a
// non-finite one stops the run there. It holds one ParallelLayout and
// never asks which it is: the layout says what this rank trains and saves (the whole model, or
// its pipeline stages), runs the steps, and combines losses, evaluations and checkpoints over
// the ranks.
class TrainingRun : private parallel::StepObserver {
 public:
  TrainingRun(const Config& config, const TrainOptions& options, const LayoutFactory& layouts)
      : config_(config),
        options_(options),
        plan_(layouts.plan().layout),
        layouts_(layouts),
        rank_(options.groups.trainers ? options.groups.trainers->rank() : 0),
        world_(options.groups.trainers ? options.groups.trainers->world() : 1) {}

  TrainSummary run();

 private:
  // Builds the run's parts; writes nothing in the run's folder.
  void set_up();
  // Loads the checkpoint to resume from, if asked and there is one; returns its path.
  std::optional<std::string> resume_if_asked();
  // The run's own files: config.yaml, the tokenizer, metrics and events (appended to when
  // `resumed`), and the accounting that writes them.
  void open_run_files(bool resumed);
  void train_epoch(int64_t epoch, int64_t first_step);
  // Returns the step's loss, unread, where it was computed.
  at::Tensor optimizer_step(int64_t epoch, int64_t step_in_epoch);
  // What the step's gradients and loss are multiplied by when some targets count in no loss
  // (token shards with loss masks): the step's positions over its counted targets.
  double counted_targets_factor(const parallel::StepOutcome& outcome);
  // Commits a checkpoint of the run as it stands (RunCheckpoints), unless this step has one.
  void save_checkpoint();
  // After each step: whether SIGTERM asks to stop here. Ranks that step together agree (any
  // rank asked -> all stop), so that they stop at the same step and one checkpoint holds it.
  bool stop_requested();
  // The stall watchdog, told what this rank's waits are for.
  void start_watchdog();
  // Starts the layout's gradient exchange and step executor from the parameters as they stand.
  void start_layout();
  void report_step(at::Tensor loss);
  // Reads the losses of the steps since the last reading at once (one wait for the device), adds
  // them to the log window and the epoch, and stops the run on a non-finite one, on every rank
  // that steps with this one (a collective then: called at the same steps by all of them).
  void settle_losses();
  // Rank 0 writes the run's files and reports; the other ranks of a data-parallel run do not.
  bool leader() const { return rank_ == 0; }
  // StepObserver: the executor's phases go to the run's accounting, and the first forward pass
  // is counted for the FLOPs.
  void enter(profile::Phase phase) override { accounting_->enter(phase); }
  void forward_begins() override;
  void forward_ends(int64_t samples) override;
  // Micro-batch k's samples in the epoch under way: the same sample gets the same dropout
  // masks in every layout.
  std::optional<models::SampleKeys> draw_keys(int64_t k) const override;
  // Micro-batch k of the optimizer step at (epoch, step_in_epoch), fed to the model.
  parallel::MicroBatch micro_batch(int64_t epoch, int64_t step_in_epoch, int64_t k);
  // The test split's loss and accuracy, the result known to every rank: each evaluates its part
  // through the layout (its whole model, or its pipeline's stages) and the sums are combined.
  EvalResult evaluate_test();
  // The summary of the run, written to summary.json by rank 0.
  TrainSummary summarize();

  const Config& config_;  // as read: never written (derived values live in the plan)
  TrainOptions options_;
  const parallel::LayoutPlan plan_;  // the layout and the step's shape, derived once
  const LayoutFactory& layouts_;
  const Clock::time_point start_ = Clock::now();
  const double cpu_seconds_at_start_ = process_cpu_seconds();

  RunParts parts_;  // data, model, layout, optimizer, losses, feeder
  std::unique_ptr<RunCheckpoints> checkpoints_;
  RunInfo info_;
  TrainPosition position_;
  int64_t steps_per_epoch_ = 0, total_steps_ = 0;
  StepFaults faults_;                      // testing aids (LOOM_FAULT_*) meant for this rank
  std::optional<LossScaler> loss_scaler_;  // fp16's (runtime.precision)
  std::vector<profile::Finding> notices_;  // said at the start, kept in the summary
  bool preempted_ = false;                 // SIGTERM: the loop stopped after the current step
  std::unique_ptr<StallWatchdog> watchdog_;

  double epoch_loss_ = 0.0;
  int64_t epoch_steps_ = 0;
  // Steps whose loss is not read yet: (step number, loss where it was computed).
  std::vector<std::pair<int64_t, at::Tensor>> unread_losses_;
  double reported_loss_ = std::numeric_limits<double>::quiet_NaN();  // the last log line's
  double last_lr_ = 0.0;
  int64_t stepping_epoch_ = 0, stepping_step_ = 0;  // the optimizer step under way
  EvalResult last_eval_;
  const int rank_, world_;                               // among the training ranks
  std::unique_ptr<RunAccounting> accounting_;            // steps, windows, files, summary
  std::unique_ptr<RemoteWorkerMetrics> remote_metrics_;  // with data.remote.workers
  double forward_flops_per_sample_ = 0;
  bool flops_counted_ = false;
  std::optional<profile::FlopCounter> flop_counter_;  // around the run's first forward pass
  std::unique_ptr<RunAutotune> autotune_;             // autotune.enabled
  std::string resumed_autotune_json_;                 // the checkpoint's finished result, if any
};

}  // namespace loom::train
