// What a training run reports: log lines, evaluation, the advisor's input, the summary, and the
// autotuner's start and end (see training_run.h).
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "loom/core/caching_allocator.h"
#include "loom/core/durable_file.h"
#include "loom/core/error.h"
#include "loom/core/thread_cpu_time.h"
#include "loom/core/topology.h"
#include "loom/data/remote/remote_batch_source.h"
#include "loom/profile/flops.h"
#include "loom/train/summary.h"
#include "loom/train/training_run.h"

namespace loom::train {

void TrainingRun::start_autotune() {
  TunedSettings start;
  start.loader_threads = data_.loader_threads;
  start.compute_threads = info_.runtime.threads;
  start.prefetch_batches = static_cast<int>(config_.data.prefetch_batches);
  start.bucket_cap_mb = config_.parallel.bucket_cap_mb;
  if (!resumed_autotune_json_.empty()) {
    // Tuned before the resume: go on with those values rather than spend steps again.
    profile::AutotuneResult earlier;
    try {
      earlier = autotune_from_json(nlohmann::ordered_json::parse(resumed_autotune_json_));
    } catch (const nlohmann::json::exception& e) {
      throw DataError("checkpoint '" + checkpoints_->last() +
                      "': its autotune result is malformed: " + e.what());
    }
    autotune_ = std::make_unique<AutotuneSession>(config_, earlier, start, *data_.train,
                                                  layout_->grad_sync());
    finish_autotune();
    return;
  }
  std::vector<parallel::GradientInfo> gradients;
  for (const auto& [name, p] : layout_->parameters()) {
    if (p.requires_grad()) gradients.push_back({p.numel(), p.scalar_type()});
  }
  autotune_ = std::make_unique<AutotuneSession>(
      config_, options_.topology.usable_cores, total_steps_ - position_.step, start, *data_.train,
      layout_->grad_sync(), options_.communicator, gradients);
}

void TrainingRun::finish_autotune() {
  const TunedSettings& chosen = autotune_->settings();
  data_.loader_threads = chosen.loader_threads;
  info_.runtime.threads = chosen.compute_threads;
  info_.runtime.threads_reason = autotune_->resumed() ? "chosen by the autotuner before the resume"
                                                      : "chosen by the autotuner";
  // The chosen settings may differ from the last ones tried: let them settle before measuring.
  accounting_->set_warmup_steps(
      std::max(accounting_->warmup_steps(), accounting_->steps() + config_.autotune.warmup_steps));
  const profile::AutotuneResult& r = *autotune_->result();
  accounting_->write({{"type", "autotune"},
                      {"step", position_.step},
                      {"chosen", autotune_json(r)["chosen"]},
                      {"resumed", autotune_->resumed()},
                      {"samples_per_second", r.chosen_score},
                      {"start_samples_per_second", r.start_score}});
}

EvalResult TrainingRun::evaluate_test() {
  EvalTally tally;
  layout_->forward_only(
      data_.test->steps_per_epoch(),
      [&](int64_t b) {
        watchdog_->progress();
        data::Batch batch = data_.test->batch(0, b);
        if (batch.size() == 0) return parallel::MicroBatch{at::Tensor(), batch.targets};
        return parallel::MicroBatch{feeder_->to_input(batch.inputs), batch.targets};
      },
      [&](const at::Tensor& logits, const at::Tensor& labels) {
        tally.add(logits, labels, *eval_loss_);
      });
  return EvalTally::from_sums(layout_->combine_eval_sums(tally.sums()));
}

void TrainingRun::report_step(double loss) {
  epoch_loss_ += loss;
  ++epoch_steps_;
  const bool log_line =
      position_.step % config_.train.log_every == 0 || position_.step == total_steps_;
  StepReport r;
  r.step = position_.step;
  r.total_steps = total_steps_;
  r.epoch = position_.epoch;
  r.epochs = config_.train.epochs;
  r.loss = accounting_->window_loss();
  // Async and SSP workers do not meet mid-epoch: a collective here would hold the fast ones
  // back to the slowest every log line. Their log shows rank 0's loss.
  if (log_line && plan_.lockstep()) r.loss = layout_->mean_over_trainers(r.loss);
  r.learning_rate = last_lr_;
  r.samples_per_second = accounting_->window_samples_per_second();
  r.tokens_per_second = r.samples_per_second * static_cast<double>(info_.tokens_per_sample);
  r.elapsed_seconds = accounting_->elapsed_seconds();
  r.eta_seconds =
      accounting_->seconds_per_step() * static_cast<double>(total_steps_ - position_.step);
  r.log_line = log_line;
  if (options_.observer) options_.observer->on_step(r);
  if (!log_line) return;
  accounting_->log_window(r.step, r.epoch + 1, r.loss, r.learning_rate);
  if (remote_metrics_) accounting_->write(remote_metrics_->window_record(r.step));
  // Parameter servers report their load to worker 0 with every step.
  if (const auto& servers = layout_->grad_sync().last_stats().servers;
      server_metrics_ && !servers.empty()) {
    accounting_->write(server_metrics_->window_record(r.step, servers));
  }
}

profile::RunProfile TrainingRun::run_profile() const {
  profile::RunProfile p;
  p.compute_threads = info_.runtime.threads;
  p.loader_threads = data_.loader_threads;
  p.loader_decodes = data_.decoded;
  p.precision = info_.runtime.precision;
  p.memory_format = info_.runtime.memory_format;
  p.convolutional = model_->is_convolutional();
  p.batch_size = plan_.step.micro_batch;
  p.threads_tuned = autotune_ && autotune_->result() != nullptr;
  const std::vector<data::RemoteWorkerStats> workers = data_.train->worker_stats();
  p.loader_cpu_seconds_per_sample = local_cpu_seconds_per_sample(data_.train->stats(), workers);
  // A worker's rate over the time it was up: one that died mid-run supplied nothing while
  // down, which says nothing of what a live one supplies.
  double delivered = 0, up_seconds = 0;
  for (const data::RemoteWorkerStats& w : workers) {
    if (w.samples == 0) continue;
    ++p.remote_workers;
    delivered += static_cast<double>(w.samples);
    up_seconds += w.up_seconds;
  }
  if (p.remote_workers > 0 && up_seconds > 0) {
    p.remote_worker_samples_per_second = delivered / up_seconds;
  }
  p.pipeline_ranks = plan_.pipeline_ranks;
  if (p.pipeline_ranks > 0) p.pipeline_microbatches = plan_.step.micro_batches;
  if (const CachingCpuAllocator* a = installed_caching_cpu_allocator()) {
    p.peak_tensor_bytes = static_cast<double>(a->stats().peak_bytes_in_use);
  }
  p.memory_cap_bytes = config_.parallel.pipeline.memory_cap_mb * (1 << 20);
  for (const auto& [name, t] : layout_->parameters()) {
    p.parameter_bytes += static_cast<double>(t.nbytes());
  }
  p.recompute = layouts_.plan().recompute_every > 0;  // as configured, or as the planner chose
  p.zero_stage = plan_.zero_stage;
  p.accumulates_gradients = plan_.step.micro_batches > 1;
  if (plan_.mode == parallel::LayoutMode::kDataParallel ||
      plan_.mode == parallel::LayoutMode::kPipeline) {
    p.data_parallel_ranks = plan_.replicas;
  }
  return p;
}

int64_t TrainingRun::gradient_bytes() const {
  // Each gradient tensor once: the parameters', and the shards' the optimizer steps under ZeRO.
  std::set<const void*> seen;
  int64_t bytes = 0;
  for (const auto* named : {&layout_->parameters(), &layout_->optimized_parameters()}) {
    for (const auto& [name, t] : *named) {
      const at::Tensor& g = t.grad();
      if (g.defined() && seen.insert(g.unsafeGetTensorImpl()).second) {
        bytes += static_cast<int64_t>(g.nbytes());
      }
    }
  }
  return bytes;
}

int64_t TrainingRun::optimizer_state_bytes() const {
  int64_t bytes = 0;
  for (const auto& [name, t] : export_optimizer_state(*optimizer_, config_.optimizer.name,
                                                      layout_->optimized_parameters())) {
    bytes += static_cast<int64_t>(t.nbytes());
  }
  return bytes;
}

TrainSummary TrainingRun::summarize() {
  TrainSummary s;
  accounting_->fill_summary(s);
  if (s.samples_per_second == 0 && autotune_ && autotune_->result()) {
    s.samples_per_second = autotune_->result()->chosen_score;  // every step was tuning
  }
  s.model = info_.model;
  s.parameters = info_.parameters;
  s.epochs = position_.epoch;
  s.steps = position_.step;
  s.samples = position_.samples;
  s.evaluated = last_eval_.samples > 0;
  s.test_accuracy = last_eval_.accuracy;
  s.test_loss = last_eval_.loss;
  if (s.tokens_per_sample > 0 && s.evaluated) s.test_perplexity = last_eval_.perplexity();
  s.final_train_loss = epoch_steps_ > 0 ? epoch_loss_ / static_cast<double>(epoch_steps_) : 0.0;
  s.sample_bytes = s.tokens_per_sample > 0
                       ? 2 * s.tokens_per_sample * static_cast<int64_t>(sizeof(int64_t))
                       : data_.input.channels * data_.input.height * data_.input.width;
  s.runtime = info_.runtime;
  s.resumed_from_step = info_.resumed_from_step;
  s.last_checkpoint = checkpoints_->last();
  s.preempted = preempted_;
  // Rank 0 writes checkpoints and knows whether the stop step's one was committed; the others
  // stopped with it and resume from what it wrote.
  s.preempted_checkpoint = preempted_ && config_.checkpoint.enabled &&
                           (!leader() || checkpoints_->committed_step() == position_.step);
  s.checkpoint_failures = checkpoints_->failures();
  s.restarts = options_.restarts;
  // This attempt went on from its checkpoint: the last restart's lost steps are now known.
  if (!s.restarts.empty() && s.restarts.back().resumed_from_step < 0) {
    s.restarts.back().resumed_from_step = std::max<int64_t>(0, info_.resumed_from_step);
  }
  s.allocator = config_.runtime.allocator;
  s.data = data_.train->stats();
  s.loader_threads = data_.loader_threads;
  s.remote_workers = data_.train->worker_stats();
  s.remote_local_batches = data_.train->local_batches();
  s.remote_receive_cpu_seconds = data_.train->receive_cpu_seconds();
  s.plan = plan_;
  s.layout = layout_->report();
  {
    // Every worker's compute over the steady steps, compared by the advisor (data parallel).
    const profile::StepTimes steady = accounting_->steady();
    s.layout.worker_compute_seconds =
        layout_->by_trainer(steady[profile::Phase::kForward] + steady[profile::Phase::kBackward] +
                            steady[profile::Phase::kOptimizer]);
  }
  s.peak_dtype = info_.runtime.bf16() ? "bf16" : "fp32";
  // Every rank calibrates its own cores at the same time; the job's peak is their sum.
  const double rank_peak =
      profile::measure_peak_flops(info_.runtime.bf16() ? at::kBFloat16 : at::kFloat, 0.1);
  s.peak_flops_per_second = world_ * rank_peak;
  s.blas = loaded_blas_library();
  s.fp32_matmul_flops_per_second =
      info_.runtime.bf16() ? profile::measure_peak_flops(at::kFloat, 0.1) : rank_peak;
  s.optimizer_state_bytes = optimizer_state_bytes();
  s.gradient_bytes = gradient_bytes();
  profile::RunProfile profiled = run_profile();
  profiled.optimizer_state_bytes = static_cast<double>(s.optimizer_state_bytes);
  profiled.worker_compute_seconds = s.layout.worker_compute_seconds;
  profiled.better_microbatches = s.layout.better_microbatches;
  profiled.better_bubble = s.layout.better_bubble;
  for (const parallel::ServerLoad& load : s.layout.servers) {
    profiled.server_busy_seconds.push_back(load.busy_seconds);
  }
  // A pipeline's ranks each counted their own stages' forward FLOPs.
  s.forward_flops_per_sample = layout_->sum_over_stages(forward_flops_per_sample_);
  // Every rank holds the whole model's shape, whatever it trains of it.
  if (const double by_formula = model_->training_flops_per_sample(); by_formula > 0) {
    s.forward_flops_per_sample = by_formula / 3;
    s.flops_basis = "6N + 12 L d T per token";
  }
  if (const CachingCpuAllocator* a = installed_caching_cpu_allocator()) {
    const AllocatorStats stats = a->stats();
    s.peak_cached_bytes_in_use = stats.peak_bytes_in_use;
    s.allocator_hit_rate = stats.allocations ? double(stats.cache_hits) / stats.allocations : 0.0;
  }
  s.buckets = layout_->grad_sync().last_stats().buckets;
  if (autotune_) {
    if (const profile::AutotuneResult* r = autotune_->result()) s.autotune = *r;
    s.autotune_resumed = autotune_->resumed();
    s.autotune_skipped = autotune_->skipped();
    if (leader() && s.autotune) {
      replace_file_atomically(options_.out_dir + "/autotune.yaml",
                              autotune_yaml(*s.autotune, info_.machine));
    }
  }
  accounting_->finish(s, profiled);
  return s;
}

}  // namespace loom::train
