#include "loom/train/step_accounting.h"

#include <ATen/Parallel.h>
#include <sys/resource.h>

#include <cmath>
#include <filesystem>

#include "loom/core/blas_library.h"
#include "loom/core/thread_cpu_time.h"
#include "loom/profile/advisor.h"
#include "loom/profile/flops.h"
#include "loom/core/durable_file.h"
#include "loom/train/metrics_log.h"
#include "loom/train/step_telemetry.h"
#include "loom/train/summary.h"

namespace loom::train {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

bool writes_files(const StepAccountingOptions& o) { return o.plan.rank == 0; }

bool made_directory(const std::string& dir) {
  std::filesystem::create_directories(dir);
  return true;
}

// Rank 0 writes the run's TensorBoard events; every rank traces (into its own file).
Config telemetry_config(Config config, int rank) {
  if (rank != 0) config.train.tensorboard = false;
  return config;
}

}  // namespace

struct StepAccounting::State {
  State(const Config& config, StepAccountingOptions options)
      : config_(config),
        options_(std::move(options)),
        out_dir_made_(made_directory(options_.out_dir)),
        topology_(detect_topology()),
        start_(Clock::now()),
        cpu_at_start_(process_cpu_seconds()),
        telemetry_(telemetry_config(config_, options_.plan.rank), options_.out_dir, options_.source,
                   options_.plan.rank, "python") {
    if (!writes_files(options_)) return;
    metrics_ = std::make_unique<MetricsLog>(options_.out_dir + "/metrics.jsonl", false);
    replace_file_atomically(options_.out_dir + "/config.yaml", config_to_yaml(config_));
  }

  void begin_step();
  void end_step(int64_t samples, double loss, double lr, int64_t epoch);
  void write_window();
  TrainSummary finish();

  Config config_;
  StepAccountingOptions options_;
  bool out_dir_made_;  // before the telemetry opens its files there
  Topology topology_;
  Clock::time_point start_;
  double cpu_at_start_ = 0;
  StepTelemetry telemetry_;
  std::unique_ptr<MetricsLog> metrics_;  // rank 0
  int64_t steps_ = 0, samples_ = 0;
  double steady_seconds_ = 0;
  int64_t steady_samples_ = 0;
  double window_seconds_ = 0, window_loss_ = 0;
  double lr_ = 0, last_loss_ = 0;  // the last step's learning rate, the last window's loss
  int64_t epoch_ = 0;
  std::weak_ptr<parallel::GradSync> exchange_;                   // watch_exchange
  std::string exchange_name_ = "local";                          // its describe()
  int buckets_ = 0;                                              // its last step's
  double comm_seconds_ = 0, comm_exposed_ = 0, comm_bytes_ = 0;  // over the steady steps
  int64_t window_steps_ = 0, window_samples_ = 0, window_losses_ = 0;
};

StepAccounting::StepAccounting(const Config& config, StepAccountingOptions options)
    : state_(std::make_unique<State>(config, std::move(options))) {}

StepAccounting::~StepAccounting() {
  if (auto exchange = state_->exchange_.lock()) exchange->set_phase_sink(nullptr);
}

void StepAccounting::watch_exchange(const std::shared_ptr<parallel::GradSync>& exchange) {
  state_->exchange_ = exchange;
  state_->exchange_name_ = exchange->describe();
  exchange->set_phase_sink(this);
}

void StepAccounting::begin_step() { state_->begin_step(); }
void StepAccounting::enter(profile::Phase phase) { state_->telemetry_.enter(phase); }
void StepAccounting::end_step(int64_t samples, double loss, double lr, int64_t epoch) {
  state_->end_step(samples, loss, lr, epoch);
}
TrainSummary StepAccounting::finish() { return state_->finish(); }
int64_t StepAccounting::steps() const { return state_->steps_; }

void StepAccounting::State::begin_step() {
  telemetry_.begin_step(steps_);
  telemetry_.enter(profile::Phase::kOther);
}

void StepAccounting::State::end_step(int64_t samples, double loss, double lr, int64_t epoch) {
  lr_ = lr;
  epoch_ = epoch;
  const bool steady = steps_ >= options_.warmup_steps;
  const double seconds = telemetry_.end_step(steps_ + 1, steady).wall;
  ++steps_;
  samples_ += samples;
  if (auto exchange = exchange_.lock()) buckets_ = exchange->last_stats().buckets;
  if (steady) {
    steady_seconds_ += seconds;
    steady_samples_ += samples;
    if (auto exchange = exchange_.lock()) {
      const parallel::SyncStats& sync = exchange->last_stats();
      comm_seconds_ += sync.comm_seconds;
      comm_exposed_ += sync.exposed_seconds;
      comm_bytes_ += static_cast<double>(sync.bytes);
    }
  }
  window_seconds_ += seconds;
  window_samples_ += samples;
  ++window_steps_;
  if (!std::isnan(loss)) {
    window_loss_ += loss;
    ++window_losses_;
  }
  if (steps_ % config_.train.log_every == 0) write_window();
}

void StepAccounting::State::write_window() {
  if (window_steps_ == 0) return;
  const double loss = window_losses_ > 0 ? window_loss_ / window_losses_ : 0.0;
  const double rate = window_seconds_ > 0 ? window_samples_ / window_seconds_ : 0.0;
  nlohmann::ordered_json record = {{"type", "step"},
                                   {"step", steps_},
                                   {"epoch", epoch_},
                                   {"loss", loss},
                                   {"lr", lr_},
                                   {"samples_per_second", rate},
                                   {"elapsed_seconds", seconds_since(start_)}};
  const double tokens = rate * static_cast<double>(options_.tokens_per_sample);
  if (tokens > 0) record["tokens_per_second"] = tokens;
  record.update(telemetry_.log_window(steps_, window_steps_, loss, lr_, rate, tokens));
  if (window_losses_ > 0) last_loss_ = loss;
  if (metrics_) metrics_->write(record);
  window_seconds_ = window_loss_ = 0;
  window_steps_ = window_samples_ = window_losses_ = 0;
}

TrainSummary StepAccounting::State::finish() {
  write_window();
  const auto exchange = exchange_.lock();
  if (exchange) exchange->set_phase_sink(nullptr);
  exchange_.reset();
  auto* trainers = options_.trainers;
  const int ranks = trainers ? trainers->world() : 1;
  if (ranks > 1 && config_.profile.trace) {
    // One trace with a process per rank: rank 0 takes the others' events once all are done.
    trainers->barrier()->wait(trainers->options().timeout);
    if (writes_files(options_)) telemetry_.merge_rank_traces(options_.out_dir, ranks);
  }
  TrainSummary s;
  s.model = options_.model;
  s.parameters = options_.parameters;
  s.steps = steps_;
  s.epochs = epoch_ + (steps_ > 0 ? 1 : 0);
  s.final_train_loss = last_loss_;
  s.samples = samples_;
  s.samples_per_second = steady_seconds_ > 0 ? steady_samples_ / steady_seconds_ : 0.0;
  s.tokens_per_sample = options_.tokens_per_sample;
  s.wall_seconds = seconds_since(start_);
  s.cpu_seconds = process_cpu_seconds() - cpu_at_start_;
  s.runtime.precision = options_.precision;
  s.runtime.memory_format = "as the script left it";
  s.runtime.threads = at::get_num_threads();
  s.runtime.precision_reason = s.runtime.memory_format_reason = s.runtime.threads_reason =
      "the script's";
  if (options_.source) s.data = options_.source->stats();
  s.loader_threads = options_.loader_threads;
  s.step_times = telemetry_.steady();
  s.steady_steps = telemetry_.steady_steps();
  s.plan = options_.plan;
  if (s.plan.step.global_batch == 0 && steps_ > 0) {
    // The script's own step: what the steps held on average, over the training ranks.
    s.plan.step.global_batch = samples_ / steps_;
    s.plan.step.replica_batch = s.plan.step.micro_batch = samples_ / steps_ / s.plan.trainers;
  }
  s.layout.exchange = exchange_name_;
  s.buckets = buckets_;
  if (s.steady_steps > 0) {
    const auto steady = static_cast<double>(s.steady_steps);
    s.comm_bytes_per_step = comm_bytes_ / steady;
    s.comm_seconds_per_step = comm_seconds_ / steady;
    s.comm_overlap = comm_seconds_ > 0 ? std::max(0.0, 1.0 - comm_exposed_ / comm_seconds_) : 0.0;
  }
  if (ranks > 1) s.layout.backend = trainers->backend();
  s.blas = loaded_blas_library();
  if (s.blas.reference())
    s.fp32_matmul_flops_per_second = profile::measure_peak_flops(at::kFloat, 0.1);
  s.peak_dtype = options_.precision;

  profile::RunProfile p;
  p.step_times = s.step_times;
  p.steps = s.steady_steps;
  p.usable_cores = topology_.usable_cores;
  p.ranks_on_host = options_.ranks_on_host;
  p.python = true;
  p.step_seconds = telemetry_.steady_series().wall_seconds();
  p.step_data_wait_seconds = telemetry_.steady_series().data_wait_seconds();
  if (const auto others = telemetry_.host_load().share()) {
    p.other_cores = others->other_cores;
    p.stolen_cores = others->stolen_cores;
  }
  p.compute_threads = s.runtime.threads;
  p.loader_threads = options_.loader_threads;
  p.loader_decodes = options_.loader_decodes;
  p.precision = options_.precision;
  p.native_bf16 = topology_.cpu.native_bf16();
  p.samples_per_second = s.samples_per_second;
  p.batch_size = steps_ > 0 ? samples_ / steps_ : 0;
  if (s.data.samples > 0) p.loader_cpu_seconds_per_sample = s.data.cpu_seconds / s.data.samples;
  const int rank_cores = std::max(1, p.usable_cores / std::max(1, p.ranks_on_host));
  if (s.wall_seconds > 0) p.cpu_utilisation = s.cpu_seconds / (s.wall_seconds * rank_cores);
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  if (topology_.memory_bytes > 0) {
    p.memory_fraction =
        static_cast<double>(usage.ru_maxrss) * 1024.0 / static_cast<double>(topology_.memory_bytes);
  }
  p.blas = s.blas.name;
  p.blas_path = s.blas.path;
  p.fp32_matmul_flops_per_second = s.fp32_matmul_flops_per_second;
  s.findings = profile::advise(p);
  if (writes_files(options_)) write_summary(options_.out_dir + "/summary.json", s, topology_);
  return s;
}

}  // namespace loom::train
