#include "loom/train/run_accounting.h"

#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "loom/train/summary.h"

namespace loom::train {

bool log_line_due(int64_t step, int64_t total_steps, int64_t log_every) {
  if (step == total_steps || total_steps < log_every) return true;
  return log_every > 0 && step % log_every == 0;
}

RunAccounting::RunAccounting(const Config& config, RunAccountingOptions options)
    : trace_(config.profile.trace),
      options_(std::move(options)),
      // Rank 0 writes the run's TensorBoard events; every rank traces (into its own file).
      telemetry_(config.profile, config.train.tensorboard && options_.rank == 0, options_.out_dir,
                 options_.source, options_.rank, options_.what) {
  telemetry_.time_on_device(options_.device);
}

void RunAccounting::open_metrics(bool append) {
  if (options_.rank == 0) {
    metrics_ = std::make_unique<MetricsLog>(options_.out_dir + "/metrics.jsonl", append);
  }
}

double RunAccounting::end_step(int64_t step, int64_t samples, double loss,
                               const parallel::SyncStats& sync, bool may_be_steady) {
  const bool steady = may_be_steady && steps_ >= warmup_steps_;
  const double seconds = telemetry_.end_step(step, steady).wall;
  ++steps_;
  step_seconds_ += seconds;
  window_seconds_ += seconds;
  window_samples_ += samples;
  ++window_steps_;
  if (!std::isnan(loss)) {
    window_loss_ += loss;
    ++window_losses_;
  }
  window_comm_seconds_ += sync.comm_seconds;
  window_comm_exposed_ += sync.exposed_seconds;
  if (steady) {
    steady_seconds_ += seconds;
    steady_samples_ += samples;
    comm_seconds_ += sync.comm_seconds;
    comm_exposed_ += sync.exposed_seconds;
    comm_bytes_ += static_cast<double>(sync.bytes);
    ++comm_steps_;
  }
  return seconds;
}

double RunAccounting::window_loss() const {
  return window_losses_ > 0 ? window_loss_ / static_cast<double>(window_losses_)
                            : std::numeric_limits<double>::quiet_NaN();
}

double RunAccounting::window_samples_per_second() const {
  return window_seconds_ > 0 ? static_cast<double>(window_samples_) / window_seconds_ : 0.0;
}

nlohmann::ordered_json RunAccounting::log_window(
    int64_t step, int64_t epoch, double loss, double lr,
    const std::vector<parallel::LayoutMetrics*>& pieces) {
  const double rate = window_samples_per_second();
  const double tokens = rate * static_cast<double>(options_.tokens_per_sample);
  nlohmann::ordered_json record = {{"type", "step"},
                                   {"step", step},
                                   {"epoch", epoch},
                                   {"loss", loss},
                                   {"lr", lr},
                                   {"samples_per_second", rate},
                                   {"elapsed_seconds", elapsed_seconds()}};
  if (tokens > 0) record["tokens_per_second"] = tokens;
  record.update(telemetry_.log_window(step, window_steps_, loss, lr, rate, tokens));
  if (options_.replicas > 1) {
    record["comm_overlap"] = window_comm_seconds_ > 0
                                 ? std::max(0.0, 1.0 - window_comm_exposed_ / window_comm_seconds_)
                                 : 0.0;
  }
  std::vector<nlohmann::ordered_json> records;
  for (parallel::LayoutMetrics* piece : pieces) piece->close_window(step, record, records);
  write(record);
  for (const auto& own : records) write(own);
  window_seconds_ = window_loss_ = window_comm_seconds_ = window_comm_exposed_ = 0;
  window_steps_ = window_samples_ = window_losses_ = 0;
  return record;
}

void RunAccounting::log_epoch(const EpochReport& r) {
  nlohmann::ordered_json record = {{"type", "epoch"},
                                   {"epoch", r.epoch + 1},
                                   {"step", r.step},
                                   {"train_loss", r.train_loss},
                                   {"train_loss_steps", r.train_loss_steps},
                                   {"seconds", r.seconds}};
  // Resumed inside this epoch: its loss covers the steps since the resume only.
  if (r.first_step > 0) record["train_loss_from_step_in_epoch"] = r.first_step;
  if (r.evaluated) {
    record["test_loss"] = r.test_loss;
    record["test_accuracy"] = r.test_accuracy;
    if (r.test_perplexity > 0) record["test_perplexity"] = r.test_perplexity;
    telemetry_.log_eval(r.step, r.test_loss, r.test_accuracy, r.test_perplexity);
    evaluations_.push_back({r.step, r.train_loss, r.test_loss});  // for the advisor
  }
  write(record);
}

double RunAccounting::elapsed_seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - options_.start).count();
}

double RunAccounting::seconds_per_step() const {
  return steps_ > 0 ? step_seconds_ / static_cast<double>(steps_) : 0.0;
}

double RunAccounting::steady_samples_per_second() const {
  return steady_seconds_ > 0 ? static_cast<double>(steady_samples_) / steady_seconds_ : 0.0;
}

void RunAccounting::merge_traces(comm::Communicator* comm, int traced_ranks) {
  if (traced_ranks <= 1 || !trace_) return;
  if (comm && comm->world() > 1) comm->barrier()->wait(comm->options().timeout);
  if (options_.rank == 0) telemetry_.merge_rank_traces(options_.out_dir, traced_ranks);
}

void RunAccounting::fill_summary(TrainSummary& s) const {
  s.samples_per_second =
      steady_seconds_ > 0 ? steady_samples_per_second() : window_samples_per_second();
  s.tokens_per_sample = options_.tokens_per_sample;
  s.wall_seconds = elapsed_seconds();
  s.cpu_seconds = process_cpu_seconds() - options_.cpu_seconds_at_start;
  s.step_times = telemetry_.steady();
  s.steady_steps = telemetry_.steady_steps();
  if (const profile::DeviceStepTimer* device = telemetry_.device_times()) {
    s.device_step_times = device->steady();
    s.device_steady_steps = device->steady_steps();
  }
  s.host_syncs = telemetry_.host_syncs();
  if (comm_steps_ > 0) {
    const auto steps = static_cast<double>(comm_steps_);
    s.comm_bytes_per_step = comm_bytes_ / steps;
    s.comm_seconds_per_step = comm_seconds_ / steps;
    s.comm_overlap = comm_seconds_ > 0 ? std::max(0.0, 1.0 - comm_exposed_ / comm_seconds_) : 0.0;
  }
}

void RunAccounting::finish(TrainSummary& s, profile::RunProfile p) const {
  const Topology& host = options_.topology;
  // On a GPU the findings that weigh phases read them on its clock: the host's charges a phase
  // with its launches, and the GPU's work to wherever the host next waits.
  p.device_clock = s.device_step_times.has_value() && s.device_steady_steps > 0;
  p.step_times = p.device_clock ? *s.device_step_times : s.step_times;
  p.steps = p.device_clock ? s.device_steady_steps : s.steady_steps;
  p.host_syncs = s.host_syncs;
  p.samples_per_second = s.samples_per_second;
  // The host's usable cores (a rank of several may have been given its share of them).
  p.usable_cores = usable_cores(host.affinity_cores, host.quota_cores);
  p.ranks_on_host = options_.ranks_on_host;
  p.python = options_.python;
  p.step_seconds = telemetry_.steady_series().wall_seconds();
  p.step_data_wait_seconds = telemetry_.steady_series().data_wait_seconds();
  if (const auto others = telemetry_.host_load().share()) {
    p.other_cores = others->other_cores;
    p.stolen_cores = others->stolen_cores;
  }
  const int rank_cores = std::max(1, p.usable_cores / std::max(1, p.ranks_on_host));
  if (s.wall_seconds > 0) p.cpu_utilisation = s.cpu_seconds / (s.wall_seconds * rank_cores);
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  if (host.memory_bytes > 0) {
    p.memory_fraction =
        static_cast<double>(usage.ru_maxrss) * 1024.0 / static_cast<double>(host.memory_bytes);
  }
  p.blas = s.blas.name;
  p.blas_path = s.blas.path;
  p.fp32_matmul_flops_per_second = s.fp32_matmul_flops_per_second;
  p.evaluations = evaluations_;
  if (s.best_checkpoint) {
    p.best_checkpoint = s.best_checkpoint->path;
    p.best_checkpoint_step = s.best_checkpoint->step;
    p.best_checkpoint_metric = s.best_checkpoint->metric;
    p.best_checkpoint_value = s.best_checkpoint->value;
  }
  s.findings = profile::advise(p);
  if (options_.rank == 0) write_summary(options_.out_dir + "/summary.json", s, host);
}

}  // namespace loom::train
