// What a training run reports: log lines, evaluation and the summary (see training_run.h).
#include <algorithm>

#include "loom/train/training_run.h"

namespace loom::train {

EvalResult TrainingRun::evaluate_test() {
  EvalTally tally;
  parts_.layout->forward_only(
      parts_.data.test->steps_per_epoch(),
      [&](int64_t b) {
        watchdog_->progress();
        data::Batch batch = parts_.data.test->batch(0, b);
        if (batch.size() == 0) return parallel::MicroBatch{at::Tensor(), batch.targets};
        return parallel::MicroBatch{parts_.feeder->to_input(batch.inputs),
                                    parts_.feeder->to_device(batch.targets)};
      },
      [&](const at::Tensor& logits, const at::Tensor& labels) {
        tally.add(logits, labels, *parts_.eval_loss);
      });
  return EvalTally::from_sums(parts_.layout->combine_eval_sums(tally.sums()));
}

void TrainingRun::report_step(at::Tensor loss) {
  unread_losses_.emplace_back(position_.step, std::move(loss));
  const bool log_line = log_line_due(position_.step, total_steps_, config_.train.log_every);
  StepReport r;
  r.step = position_.step;
  r.total_steps = total_steps_;
  r.epoch = position_.epoch;
  r.epochs = config_.train.epochs;
  if (log_line) {
    settle_losses();
    reported_loss_ = accounting_->window_loss();
    // Async and SSP workers do not meet mid-epoch: a collective here would hold the fast ones
    // back to the slowest every log line. Their log shows rank 0's loss.
    if (plan_.lockstep()) reported_loss_ = parts_.layout->mean_over_trainers(reported_loss_);
  }
  // Between log lines the last line's loss (a progress bar shows it).
  r.loss = reported_loss_;
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
  s.model = info_.model;
  s.parameters = info_.parameters;
  s.epochs = position_.epoch;
  s.steps = position_.step;
  s.samples = position_.samples;
  s.notices = notices_;
  s.evaluated = last_eval_.samples > 0;
  s.test_accuracy = last_eval_.accuracy;
  s.test_loss = last_eval_.loss;
  if (s.tokens_per_sample > 0 && s.evaluated) s.test_perplexity = last_eval_.perplexity();
  s.final_train_loss = epoch_steps_ > 0 ? epoch_loss_ / static_cast<double>(epoch_steps_) : 0.0;
  s.runtime = info_.runtime;
  if (loss_scaler_) s.loss_scale = loss_scaler_->state();
  s.resumed_from_step = info_.resumed_from_step;
  s.preempted = preempted_;
  checkpoints_->fill_summary(position_, preempted_, s);
  s.restarts = options_.restarts;
  // This attempt went on from its checkpoint: the last restart's lost steps are now known.
  if (!s.restarts.empty() && s.restarts.back().resumed_from_step < 0) {
    s.restarts.back().resumed_from_step = std::max<int64_t>(0, info_.resumed_from_step);
  }
  s.plan = plan_;
  fill_parts_summary(parts_, info_, config_, world_, forward_flops_per_sample_,
                     accounting_->steady(), s);
  profile::RunProfile profiled = parts_profile(parts_, config_, layouts_.plan(), info_, s);
  if (autotune_) autotune_->fill_summary(leader(), s, profiled);
  accounting_->finish(s, profiled);
  return s;
}

}  // namespace loom::train
