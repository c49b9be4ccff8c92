// Where a training run's step time goes, and the files that show it: the trainer marks phase
// boundaries (enter) and step ends; this keeps the per-window and steady-state sums, writes
// TensorBoard scalars (train.tensorboard) and the Chrome trace of the profile.trace window.
//
// Threading: used from the training thread; the loader observer it installs runs on loader
// threads and only reads an atomic flag and writes to the (thread-safe) trace.
#pragma once

#include <c10/util/Exception.h>

#include <atomic>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "loom/core/config.h"
#include "loom/data/batch_source.h"
#include "loom/profile/device_step_timer.h"
#include "loom/profile/host_load.h"
#include "loom/profile/host_sync_counter.h"
#include "loom/profile/step_series.h"
#include "loom/profile/step_timer.h"
#include "loom/profile/tfevents_writer.h"
#include "loom/profile/trace_writer.h"
#include "loom/train/stall_watchdog.h"

namespace loom::train {

// Where rank `rank` writes its trace in a run directory (rank 0: trace.json, which gets the rest).
std::string rank_trace_path(const std::string& out_dir, int rank);

class StepTelemetry {
 public:
  // Creates the event file and trace in `out_dir` as configured, and observes `train`'s
  // batches for the trace (null: a loop whose batches come from elsewhere). Rank 0 traces into
  // trace.json, rank r into trace.rank<r>.json (each on its own process track, on the host's
  // common clock); merge_rank_traces() joins them. `what` names the process in the trace.
  // `tensorboard`: write the event file (rank 0 of a run that asks for it).
  StepTelemetry(const ProfileConfig& profile, bool tensorboard, const std::string& out_dir,
                data::BatchSource* train, int rank = 0, const std::string& what = "loom train");
  // The device timer's trace sink refers to this object: it stays where it was made.
  StepTelemetry(const StepTelemetry&) = delete;
  StepTelemetry& operator=(const StepTelemetry&) = delete;
  // Rank 0, once every rank has stopped tracing: moves the other ranks' events into trace.json.
  void merge_rank_traces(const std::string& out_dir, int world);

  // `index`: steps already run by this process (0 for the first).
  void begin_step(int64_t index);
  void enter(profile::Phase phase) {
    timer_.enter(phase);
    with_device_timer([phase](profile::DeviceStepTimer& t) { t.enter(phase); });
    if (sync_counter_) sync_counter_->enter(phase);
    if (watchdog_) watchdog_->enter(phase);
  }
  // The steps compute on `device`: where it is not the CPU, their phases are also timed on its
  // clock (profile/device_step_timer.h), drawn in the trace on a track of the device's own, and
  // on a GPU the first kSyncCountedSteps steady steps' host synchronisations are counted
  // (profile/host_sync_counter.h). Before the first step, on the thread that runs the steps.
  void time_on_device(c10::Device device);
  static constexpr int64_t kSyncCountedSteps = 20;
  // What was counted (steps 0: nothing, as on the CPU). Counting stops at the run's end.
  const profile::HostSyncs& host_syncs() const { return host_syncs_; }
  // The steady steps' phases on the device's clock, once read_device_times() read them all; null
  // on the CPU (and where the device's events failed).
  const profile::DeviceStepTimer* device_times() const { return device_timer_.get(); }
  // Reads every step's device times, waiting for the device to pass the last (the run's end).
  void read_device_times() {
    with_device_timer([](profile::DeviceStepTimer& t) { t.read(/*wait=*/true); });
    sync_counter_.reset();
  }
  // Phases also go to the stall watchdog from now on (not owned; null: none).
  void set_watchdog(StallWatchdog* watchdog) { watchdog_ = watchdog; }
  // Ends the step numbered `step` (1-based, for the trace); `steady` adds it to the
  // steady-state sums. Returns its times.
  profile::StepTimes end_step(int64_t step, bool steady);

  // A log line: the window's mean step time and phases, for metrics.jsonl, and TensorBoard
  // scalars; starts a new window.
  nlohmann::ordered_json log_window(int64_t step, int64_t steps, double loss, double lr,
                                    double samples_per_second, double tokens_per_second = 0);
  // `perplexity` 0: not a language model (not logged).
  void log_eval(int64_t step, double loss, double accuracy, double perplexity);

  const profile::StepTimes& steady() const { return steady_; }
  int64_t steady_steps() const { return steady_steps_; }
  // The steady steps one by one, and what else ran on this process's cores since the first
  // of them ended (for the advisor's unsteady_throughput).
  const profile::StepSeries& steady_series() const { return series_; }
  const profile::HostLoad& host_load() const { return host_load_; }

 private:
  void trace_step(int64_t step);
  // The device's track, from the first traced step on (where the device is timed).
  void start_device_track();
  // A traced step's phases on the device's clock, on the device's track.
  void trace_device_step(int64_t step, double begin, double end,
                         const std::vector<profile::DeviceStepTimer::Span>& spans);
  // Runs `use` on the device timer, if there is one. Timing is not worth a run: an error from the
  // device's events turns it off, with a warning, and the run goes on.
  template <typename Use>
  void with_device_timer(Use&& use) {
    if (!device_timer_) return;
    try {
      use(*device_timer_);
    } catch (const c10::Error& e) {
      device_timing_failed(e);
    }
  }
  void device_timing_failed(const c10::Error& e);
  // The device's phases of the steps it has finished since the last log line, into `out`
  // (metrics.jsonl's step record) and TensorBoard; nothing on the CPU.
  void log_device_window(int64_t step, nlohmann::ordered_json& out);

  const ProfileConfig profile_;
  StallWatchdog* watchdog_ = nullptr;
  data::BatchSource* train_;
  profile::StepTimer timer_;
  std::unique_ptr<profile::DeviceStepTimer> device_timer_;  // null on the CPU
  c10::Device device_ = c10::kCPU;                          // time_on_device's
  // The device's trace track (-1 until the first traced step) and where its spans start from
  // on the host's clock.
  int device_track_ = -1;
  profile::TraceWriter::Clock::time_point device_origin_;
  // Null on the CPU, where torch's switch cannot be reached, and once enough steps are counted.
  std::unique_ptr<profile::HostSyncCounter> sync_counter_;
  profile::HostSyncs host_syncs_;
  profile::StepTimes window_, steady_;
  int64_t steady_steps_ = 0;
  profile::StepSeries series_;
  profile::HostLoad host_load_;
  std::unique_ptr<profile::TfEventsWriter> events_;  // null when train.tensorboard is off
  // Shared with the loader observer, which may run on a loader thread after this object is
  // gone (the loader outlives it briefly while its threads stop).
  std::shared_ptr<profile::TraceWriter> trace_;  // null unless profile.trace
  std::shared_ptr<std::atomic<bool>> tracing_ = std::make_shared<std::atomic<bool>>(false);
  // At the end of the last traced step, for the utilisation counters (-1: none yet).
  double last_cpu_seconds_ = -1, last_build_seconds_ = 0;
};

}  // namespace loom::train
