#include "loom/train/step_telemetry.h"

#include <cstdio>

#include "loom/core/cuda_sync_warnings.h"
#include "loom/core/log.h"
#include "loom/core/settings.h"
#include "loom/core/thread_cpu_time.h"

namespace loom::train {

using profile::Phase;

std::string rank_trace_path(const std::string& out_dir, int rank) {
  return out_dir + (rank == 0 ? "/trace.json" : "/trace.rank" + std::to_string(rank) + ".json");
}

StepTelemetry::StepTelemetry(const ProfileConfig& profile, bool tensorboard,
                             const std::string& out_dir, data::BatchSource* train, int rank,
                             const std::string& what)
    : profile_(profile), train_(train), timer_(setting_int("LOOM_STEP_ACCOUNTING") != 0) {
  if (tensorboard) events_ = std::make_unique<profile::TfEventsWriter>(out_dir);
  if (!profile_.trace) return;
  trace_ = std::make_unique<profile::TraceWriter>(rank_trace_path(out_dir, rank), rank,
                                                  what + " (rank " + std::to_string(rank) + ")");
  trace_->name_thread("main");
  if (!train_) return;
  // Loader threads draw the batches they build on their own tracks, while the trace is on; a
  // remote data worker's batches are drawn, from request to arrival, on the tracks of the
  // threads that fetch them, named after the worker.
  train_->set_batch_observer([trace = trace_, tracing = tracing_](int64_t, int64_t step, auto begin,
                                                                  auto end,
                                                                  const std::string& origin) {
    if (!tracing->load(std::memory_order_relaxed)) return;
    thread_local bool named = false;
    if (!named) trace->name_thread(origin.empty() ? "loader" : "data worker " + origin);
    named = true;
    if (origin.empty()) {
      trace->complete("batch " + std::to_string(step), "loader", begin, end);
    } else {
      trace->complete("remote batch " + std::to_string(step), "remote", begin, end,
                      nlohmann::json{{"worker", origin}}.dump());
    }
  });
}

void StepTelemetry::begin_step(int64_t index) {
  // profile.trace_wait steps, then trace_warmup, then trace_active steps are traced.
  const int64_t first = profile_.trace_wait + profile_.trace_warmup;
  *tracing_ = trace_ && index >= first && index < first + profile_.trace_active;
  if (*tracing_ && device_timer_ && device_track_ < 0) start_device_track();
  timer_.begin_step(*tracing_);
  with_device_timer([](profile::DeviceStepTimer& t) { t.begin_step(); });
  if (sync_counter_) sync_counter_->begin_step();
}

void StepTelemetry::start_device_track() {
  // Between steps, as the trace starts: the origin's time is when the host saw the device pass
  // it, which puts the device's clock on the host's axis near the traced steps. The wait drains
  // the device's queue once, so the first traced step starts without the host ahead.
  bool anchored = false;
  with_device_timer([&](profile::DeviceStepTimer& t) {
    t.trace_from_here([this](int64_t step, double begin, double end, const auto& spans) {
      trace_device_step(step, begin, end, spans);
    });
    anchored = true;
  });
  if (!anchored) return;
  device_origin_ = profile::TraceWriter::Clock::now();
  device_track_ = trace_->add_track(device_.str() + " (the device's clock)");
}

void StepTelemetry::device_timing_failed(const c10::Error& e) {
  LOOM_LOG(kWarn, "profile") << "the steps' phases are no longer timed on the device: "
                             << e.what_without_backtrace();
  device_timer_.reset();
}

void StepTelemetry::time_on_device(c10::Device device) {
  if (device.is_cpu()) return;
  device_timer_ = std::make_unique<profile::DeviceStepTimer>(profile::device_event_marks(device));
  device_ = device;
  if (!device.is_cuda()) return;
  sync_counter_ = std::make_unique<profile::HostSyncCounter>(
      [](bool on) { return set_cuda_sync_warnings(on); });
  if (!sync_counter_->counting()) sync_counter_.reset();
}

profile::StepTimes StepTelemetry::end_step(int64_t step, bool steady) {
  const profile::StepTimes times = timer_.end_step();
  with_device_timer([steady, step, traced = tracing_->load()](profile::DeviceStepTimer& t) {
    t.end_step(steady, traced ? step : -1);
    t.read(/*wait=*/false);  // the steps the device has passed: no waiting here
  });
  if (sync_counter_) {
    sync_counter_->end_step(steady);
    host_syncs_ = sync_counter_->totals();
    if (host_syncs_.steps >= kSyncCountedSteps) sync_counter_.reset();  // warnings off again
  }
  if (*tracing_) trace_step(step);
  window_ += times;
  if (steady) {
    steady_ += times;
    ++steady_steps_;
    series_.add(times.wall, times[Phase::kDataWait]);
    if (steady_steps_ == 1) host_load_.start();  // from the first steady step on
  }
  return times;
}

void StepTelemetry::trace_step(int64_t step) {
  trace_->complete("step " + std::to_string(step), "step", timer_.step_begin(), timer_.step_end());
  for (const auto& slice : timer_.slices()) {
    trace_->complete(profile::phase_name(slice.phase), "phase", slice.begin, slice.end);
  }
  if (!train_) return;
  trace_->counter("prefetched batches", timer_.step_end(), train_->ready_batches());

  // Utilisation over the step: cores' worth of CPU the process used, and loader threads busy
  // building batches (thread-seconds per second).
  const double cpu = process_cpu_seconds();
  const double built = train_->stats().build_seconds;
  const double wall =
      std::chrono::duration<double>(timer_.step_end() - timer_.step_begin()).count();
  if (last_cpu_seconds_ >= 0 && wall > 0) {
    trace_->counter("process CPU (cores)", timer_.step_end(), (cpu - last_cpu_seconds_) / wall);
    trace_->counter("loader threads busy", timer_.step_end(), (built - last_build_seconds_) / wall);
  }
  last_cpu_seconds_ = cpu;
  last_build_seconds_ = built;
}

void StepTelemetry::trace_device_step(int64_t step, double begin, double end,
                                      const std::vector<profile::DeviceStepTimer::Span>& spans) {
  const auto at = [this](double seconds) {
    return device_origin_ + std::chrono::duration_cast<profile::TraceWriter::Clock::duration>(
                                std::chrono::duration<double>(seconds));
  };
  trace_->complete_on(device_track_, "step " + std::to_string(step), "device step", at(begin),
                      at(end));
  for (const auto& span : spans) {
    trace_->complete_on(device_track_, profile::phase_name(span.phase), "device phase",
                        at(span.begin), at(span.end));
  }
}

nlohmann::ordered_json StepTelemetry::log_window(int64_t step, int64_t steps, double loss,
                                                 double lr, double samples_per_second,
                                                 double tokens_per_second) {
  nlohmann::ordered_json phases = nlohmann::ordered_json::object();
  const double n = static_cast<double>(std::max<int64_t>(steps, 1));
  for (size_t i = 0; i < profile::kPhaseCount; ++i) {
    phases[profile::phase_name(static_cast<Phase>(i))] = window_.seconds[i] / n;
  }
  if (events_) {
    events_->scalar("train/loss", step, loss);
    events_->scalar("train/learning_rate", step, lr);
    events_->scalar("train/samples_per_second", step, samples_per_second);
    if (tokens_per_second > 0) events_->scalar("train/tokens_per_second", step, tokens_per_second);
    for (size_t i = 0; i < profile::kPhaseCount; ++i) {
      events_->scalar(std::string("step_share/") + profile::phase_name(static_cast<Phase>(i)), step,
                      window_.share(static_cast<Phase>(i)));
    }
  }
  nlohmann::ordered_json out = {{"step_seconds", window_.wall / n}, {"phase_seconds", phases}};
  window_ = {};
  log_device_window(step, out);
  return out;
}

void StepTelemetry::log_device_window(int64_t step, nlohmann::ordered_json& out) {
  profile::DeviceStepTimer::Window window;
  with_device_timer([&window](profile::DeviceStepTimer& t) {
    t.read(/*wait=*/false);
    window = t.take_window();
  });
  if (window.steps == 0) return;
  const double n = static_cast<double>(window.steps);
  nlohmann::ordered_json phases = nlohmann::ordered_json::object();
  for (size_t i = 0; i < profile::kPhaseCount; ++i) {
    const auto phase = static_cast<Phase>(i);
    phases[profile::phase_name(phase)] = window.times[phase] / n;
    if (events_) {
      events_->scalar(std::string("device_step_share/") + profile::phase_name(phase), step,
                      window.times.share(phase));
    }
  }
  out["device_steps"] = window.steps;
  out["device_step_seconds"] = window.times.wall / n;
  out["device_phase_seconds"] = phases;
}

void StepTelemetry::log_eval(int64_t step, double loss, double accuracy, double perplexity) {
  if (!events_) return;
  events_->scalar("test/loss", step, loss);
  events_->scalar("test/accuracy", step, accuracy);
  if (perplexity > 0) events_->scalar("test/perplexity", step, perplexity);
}

void StepTelemetry::merge_rank_traces(const std::string& out_dir, int world) {
  if (!trace_) return;
  for (int rank = 1; rank < world; ++rank) {
    const std::string path = rank_trace_path(out_dir, rank);
    trace_->merge(path);
    std::remove(path.c_str());
  }
}

}  // namespace loom::train
