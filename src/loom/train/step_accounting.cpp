#include "loom/train/step_accounting.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "loom/core/blas_library.h"
#include "loom/core/durable_file.h"
#include "loom/profile/flops.h"
#include "loom/train/run_accounting.h"

namespace loom::train {
namespace {

bool made_directory(const std::string& dir) {
  std::filesystem::create_directories(dir);
  return true;
}

RunAccountingOptions accounting_options(const StepAccountingOptions& o, const Topology& host) {
  RunAccountingOptions a;
  a.out_dir = o.out_dir;
  a.rank = o.plan.rank;
  a.what = "python";
  a.source = o.source;
  a.tokens_per_sample = o.tokens_per_sample;
  a.replicas = o.plan.data.replicas;
  a.topology = host;
  a.ranks_on_host = o.ranks_on_host;
  a.python = true;
  return a;
}

}  // namespace

// The script's loop over the run's accounting: what the loop does not say itself (the
// exchange's figures, the mean batch) is read here.
struct StepAccounting::State {
  State(const Config& config, StepAccountingOptions options)
      : options_(std::move(options)),
        out_dir_made_(made_directory(options_.out_dir)),
        host_(detect_topology()),
        accounting_(config, accounting_options(options_, host_)),
        log_every_(config.train.log_every) {
    accounting_.set_warmup_steps(options_.warmup_steps);
    if (options_.plan.rank != 0) return;
    accounting_.open_metrics(false);
    replace_file_atomically(options_.out_dir + "/config.yaml", config_to_yaml(config));
  }

  void end_step(int64_t samples, double loss, double lr, int64_t epoch);
  void write_window();
  TrainSummary finish();

  StepAccountingOptions options_;
  bool out_dir_made_;  // before the accounting opens its files there
  Topology host_;
  RunAccounting accounting_;
  int64_t log_every_;
  int64_t samples_ = 0;
  double lr_ = 0, last_loss_ = 0;  // the last step's learning rate, the last window's loss
  int64_t epoch_ = 0;
  std::weak_ptr<parallel::GradSync> exchange_;  // watch_exchange
  std::string exchange_name_ = "local";         // its describe()
  int buckets_ = 0;                             // its last step's
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

void StepAccounting::begin_step() {
  state_->accounting_.begin_step();
  state_->accounting_.enter(profile::Phase::kOther);
}
void StepAccounting::enter(profile::Phase phase) { state_->accounting_.enter(phase); }
void StepAccounting::end_step(int64_t replica_samples, double loss, double lr, int64_t epoch) {
  state_->end_step(replica_samples * state_->options_.plan.data.replicas, loss, lr, epoch);
}
TrainSummary StepAccounting::finish() { return state_->finish(); }
int64_t StepAccounting::steps() const { return state_->accounting_.steps(); }

void StepAccounting::State::end_step(int64_t samples, double loss, double lr, int64_t epoch) {
  lr_ = lr;
  epoch_ = epoch;
  parallel::SyncStats sync;
  if (auto exchange = exchange_.lock()) {
    sync = exchange->last_stats();
    buckets_ = sync.buckets;
  }
  accounting_.end_step(accounting_.steps() + 1, samples, loss, sync);
  samples_ += samples;
  if (accounting_.steps() % log_every_ == 0) write_window();
}

void StepAccounting::State::write_window() {
  if (accounting_.window_empty()) return;
  const double loss = accounting_.window_loss();
  if (!std::isnan(loss)) last_loss_ = loss;
  std::vector<parallel::LayoutMetrics*> pieces;
  if (auto exchange = exchange_.lock()) {
    if (parallel::LayoutMetrics* own = exchange->metrics()) pieces.push_back(own);
  }
  accounting_.log_window(accounting_.steps(), epoch_, std::isnan(loss) ? 0.0 : loss, lr_, pieces);
}

TrainSummary StepAccounting::State::finish() {
  write_window();
  const auto exchange = exchange_.lock();
  if (exchange) exchange->set_phase_sink(nullptr);
  exchange_.reset();
  auto* trainers = options_.trainers;
  const int ranks = trainers ? trainers->world() : 1;
  accounting_.merge_traces(trainers, ranks);
  const int64_t steps = accounting_.steps();
  TrainSummary s;
  accounting_.fill_summary(s);
  s.samples_per_second = accounting_.steady_samples_per_second();
  s.model = options_.model;
  s.parameters = options_.parameters;
  s.steps = steps;
  s.epochs = epoch_ + (steps > 0 ? 1 : 0);
  s.final_train_loss = last_loss_;
  s.samples = samples_;
  s.runtime.precision = options_.precision;
  s.runtime.device = s.runtime.memory_format = "as the script left it";
  s.runtime.threads = at::get_num_threads();
  s.runtime.device_reason = s.runtime.precision_reason = s.runtime.memory_format_reason =
      s.runtime.threads_reason = "the script's";
  if (options_.source) s.data = options_.source->stats();
  s.loader_threads = options_.loader_threads;
  s.plan = options_.plan;
  // The script's own step, whatever the job's configuration said of its batch: what the steps
  // held on average, shared by the replicas (a tensor group's ranks all read their replica's);
  // a pipeline's in its micro-batches, anything else's at once.
  parallel::StepShape& step = s.plan.step;
  step.micro_batches = s.plan.pipeline ? std::max<int64_t>(1, step.micro_batches) : 1;
  step.global_batch = steps > 0 ? samples_ / steps : 0;
  step.replica_batch = step.global_batch / std::max(1, s.plan.data.replicas);
  step.micro_batch = step.replica_batch / step.micro_batches;
  s.layout.exchange = exchange_name_;
  s.buckets = buckets_;
  if (ranks > 1) s.layout.backend = trainers->backend();
  s.blas = loaded_blas_library();
  if (s.blas.reference())
    s.fp32_matmul_flops_per_second = profile::measure_peak_flops(at::kFloat, 0.1);
  s.peak_dtype = options_.precision;

  profile::RunProfile p;
  p.compute_threads = s.runtime.threads;
  p.loader_threads = options_.loader_threads;
  p.loader_decodes = options_.loader_decodes;
  p.precision = options_.precision;
  p.native_bf16 = host_.cpu.native_bf16();  // a script's own loop is profiled on the CPU
  p.batch_size = steps > 0 ? samples_ / steps : 0;
  if (s.data.samples > 0) p.loader_cpu_seconds_per_sample = s.data.cpu_seconds / s.data.samples;
  accounting_.finish(s, p);
  return s;
}

}  // namespace loom::train
