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
  start.loader_threads = parts_.data.loader_threads;
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
    autotune_ = std::make_unique<AutotuneSession>(config_, earlier, start, *parts_.data.train,
                                                  parts_.layout->grad_sync());
    finish_autotune();
    return;
  }
  std::vector<parallel::GradientInfo> gradients;
  for (const auto& [name, p] : parts_.layout->parameters()) {
    if (p.requires_grad()) gradients.push_back({p.numel(), p.scalar_type()});
  }
  autotune_ = std::make_unique<AutotuneSession>(
      config_, options_.topology.usable_cores, total_steps_ - position_.step, start,
      *parts_.data.train, parts_.layout->grad_sync(), options_.communicator, gradients);
}

void TrainingRun::finish_autotune() {
  const TunedSettings& chosen = autotune_->settings();
  parts_.data.loader_threads = chosen.loader_threads;
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
  parts_.layout->forward_only(
      parts_.data.test->steps_per_epoch(),
      [&](int64_t b) {
        watchdog_->progress();
        data::Batch batch = parts_.data.test->batch(0, b);
        if (batch.size() == 0) return parallel::MicroBatch{at::Tensor(), batch.targets};
        return parallel::MicroBatch{parts_.feeder->to_input(batch.inputs), batch.targets};
      },
      [&](const at::Tensor& logits, const at::Tensor& labels) {
        tally.add(logits, labels, *parts_.eval_loss);
      });
  return EvalTally::from_sums(parts_.layout->combine_eval_sums(tally.sums()));
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
  if (log_line && plan_.lockstep()) r.loss = parts_.layout->mean_over_trainers(r.loss);
  r.learning_rate = last_lr_;
  r.samples_per_second = accounting_->window_samples_per_second();
  r.tokens_per_second = r.samples_per_second * static_cast<double>(info_.tokens_per_sample);
  r.elapsed_seconds = accounting_->elapsed_seconds();
  r.eta_seconds =
      accounting_->seconds_per_step() * static_cast<double>(total_steps_ - position_.step);
  r.log_line = log_line;
  if (options_.observer) options_.observer->on_step(r);
  if (!log_line) return;
  accounting_->log_window(r.step, r.epoch + 1, r.loss, r.learning_rate, parts_.layout->metrics());
  if (remote_metrics_) accounting_->write(remote_metrics_->window_record(r.step));
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
  s.plan = plan_;
  fill_parts_summary(parts_, info_, config_, world_, forward_flops_per_sample_,
                     accounting_->steady(), s);
  profile::RunProfile profiled = parts_profile(parts_, config_, layouts_.plan(), info_, s);
  profiled.threads_tuned = autotune_ && autotune_->result() != nullptr;
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
