// A run's accounting, the same for `loom train` and for a script's own loop (loom.profile.Steps):
// where each step's time goes (StepTelemetry: phases, TensorBoard, the trace), the log-line
// windows and the steady state (throughput after warm-up, the exchange's time, bytes and
// overlap), metrics.jsonl, the trace merged over the ranks, and at the end the summary's and
// the advisor's common part and summary.json. The loop says where steps begin and end, what
// they trained on and what the layout's exchange reported; it adds what only it knows (the
// model, evaluation, checkpoints) to the summary and the advisor's profile.
//
// Rank 0 writes the files (metrics.jsonl, TensorBoard events, summary.json); every rank traces
// into its own file, which rank 0 merges.
//
// Threading: the training thread only (the telemetry's loader observer aside, see
// step_telemetry.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "loom/comm/communicator.h"
#include "loom/core/config.h"
#include "loom/core/step_phase.h"
#include "loom/core/thread_cpu_time.h"
#include "loom/core/topology.h"
#include "loom/data/batch_source.h"
#include "loom/parallel/grad_sync.h"
#include "loom/parallel/layout_metrics.h"
#include "loom/profile/advisor.h"
#include "loom/train/metrics_log.h"
#include "loom/train/step_telemetry.h"
#include "loom/train/trainer.h"

namespace loom::train {

// Whether step `step` (1-based) of a run of `total_steps` steps writes a log line (a metrics
// record): every `log_every` steps and the run's last; every step of a run shorter than
// `log_every`, so that a short run still draws a curve rather than one point.
bool log_line_due(int64_t step, int64_t total_steps, int64_t log_every);

struct RunAccountingOptions {
  std::string out_dir;
  int rank = 0;                         // among the ranks that train; 0 writes the files
  std::string what = "loom train";      // names the process in the trace
  data::BatchSource* source = nullptr;  // the loop's Loom loader (null: batches from elsewhere)
  int64_t tokens_per_sample = 0;        // a language model's window: tokens/s too (0: none)
  int replicas = 1;       // data-parallel copies: log lines then show the exchange's overlap
  Topology topology;      // the host's (its usable cores, not this rank's share of them)
  int ranks_on_host = 1;  // the job's ranks on this host, parameter servers included
  bool python = false;    // a script's loop: the advisor speaks in Python terms
  // Where the steps compute: off the CPU their phases are also timed on the device's clock.
  c10::Device device = c10::kCPU;
  // When the run began, its set-up included, for its wall and CPU seconds.
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  double cpu_seconds_at_start = process_cpu_seconds();
};

class RunAccounting : public PhaseSink {
 public:
  RunAccounting(const Config& config, RunAccountingOptions options);

  // metrics.jsonl, started afresh or appended to (a resumed run). Rank 0; before the first step.
  void open_metrics(bool append);
  // This process's first `steps` steps are left out of the steady state (allocator and oneDNN
  // warm-up; settings the autotuner chose settling).
  void set_warmup_steps(int64_t steps) { warmup_steps_ = steps; }
  int64_t warmup_steps() const { return warmup_steps_; }
  // Phases also go to the stall watchdog (not owned).
  void set_watchdog(StallWatchdog* watchdog) { telemetry_.set_watchdog(watchdog); }

  void begin_step() { telemetry_.begin_step(steps_); }
  // The run's end: the steps' device times are read, waiting for the device to pass the last.
  void read_device_times() { telemetry_.read_device_times(); }
  void enter(profile::Phase phase) override { telemetry_.enter(phase); }
  // Ends this process's step, numbered `step` in the run (1-based), that trained on `samples`
  // samples (every rank's) with this loss (NaN: not known) and whose exchange reported `sync`.
  // `may_be_steady` false keeps it out of the steady state (the autotuner trying settings).
  // Returns its wall seconds.
  double end_step(int64_t step, int64_t samples, double loss, const parallel::SyncStats& sync,
                  bool may_be_steady = true);

  // A step's loss, read after its end_step (the run reads losses at log lines): into the window.
  void add_loss(double loss) {
    window_loss_ += loss;
    ++window_losses_;
  }
  // The window since the last log line: its mean loss (over the steps that had one) and rate.
  double window_loss() const;
  double window_samples_per_second() const;
  bool window_empty() const { return window_steps_ == 0; }
  // The log line: a "step" record of the window (with `loss`, which a data-parallel run has
  // averaged over its ranks) and what the layout's `pieces` add to it and after it (their own
  // records), to metrics.jsonl and TensorBoard; starts a new window. Returns the step record.
  nlohmann::ordered_json log_window(int64_t step, int64_t epoch, double loss, double lr,
                                    const std::vector<parallel::LayoutMetrics*>& pieces = {});
  // The end of an epoch: an "epoch" record, with its evaluation (also to TensorBoard, and kept
  // for the advisor's overfitting rule) if any.
  void log_epoch(const EpochReport& r);
  void write(const nlohmann::ordered_json& record) {
    if (metrics_) metrics_->write(record);
  }

  int64_t steps() const { return steps_; }  // by this process
  double elapsed_seconds() const;
  // The mean step time so far, for an estimate of the time left.
  double seconds_per_step() const;
  const profile::StepTimes& steady() const { return telemetry_.steady(); }
  // Steady-state throughput; 0 before any steady step.
  double steady_samples_per_second() const;

  // One trace with a process per rank: after every rank (`comm`'s, collective) stopped
  // tracing, rank 0 takes the others' events (`traced_ranks`: parameter servers too).
  void merge_traces(comm::Communicator* comm, int traced_ranks);

  // What every run reports: the steady state's times and rates, the exchange's per-step
  // figures, wall and CPU seconds. A loop with no steady step reports its last window's rate.
  void fill_summary(TrainSummary& s) const;
  // The summary's findings from `p` (the loop's part filled) completed with the host's and the
  // steps' part; rank 0 writes summary.json.
  void finish(TrainSummary& s, profile::RunProfile p) const;

 private:
  const bool trace_;  // profile.trace
  RunAccountingOptions options_;
  StepTelemetry telemetry_;
  std::unique_ptr<MetricsLog> metrics_;  // rank 0

  int64_t warmup_steps_ = 0, steps_ = 0;
  double step_seconds_ = 0;  // every step's, for seconds_per_step()
  double steady_seconds_ = 0;
  int64_t steady_samples_ = 0;
  // The exchange over the steady steps.
  double comm_seconds_ = 0, comm_exposed_ = 0, comm_bytes_ = 0;
  int64_t comm_steps_ = 0;
  // The window since the last log line.
  double window_seconds_ = 0, window_loss_ = 0;
  int64_t window_steps_ = 0, window_samples_ = 0, window_losses_ = 0;
  double window_comm_seconds_ = 0, window_comm_exposed_ = 0;
  std::vector<profile::Evaluation> evaluations_;  // the epochs' evaluations, for the advisor
};

}  // namespace loom::train
