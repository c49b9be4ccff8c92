#include "loom/train/trainer.h"

#include <cmath>
#include <csignal>
#include <filesystem>
#include <limits>
#include <optional>

#include "loom/comm/rendezvous.h"
#include "loom/core/durable_file.h"
#include "loom/core/error.h"
#include "loom/core/log.h"
#include "loom/core/rng.h"
#include "loom/data/tokenizer.h"
#include "loom/train/optimizer.h"
#include "loom/train/optimizer_on_servers.h"
#include "loom/train/resume_check.h"
#include "loom/train/schedule.h"
#include "loom/train/start_notices.h"
#include "loom/train/training_run.h"

namespace loom::train {

void TrainingRun::set_up() {
  // What the checkpoint was written with is checked first, from its manifest alone: before
  // anything is built (a refused resume fails fast) or written (it leaves the folder as it was).
  if (options_.resume) {
    if (const auto latest = checkpoint_to_resume(options_.out_dir)) {
      check_resume_config(config_, *latest);
    }
  }
  std::filesystem::create_directories(options_.out_dir);
  parts_ = build_run_parts(config_, options_, layouts_, plan_.data.replica, plan_.data.replicas,
                           leader(), info_);

  steps_per_epoch_ = parts_.data.train->steps_per_epoch() / plan_.step.micro_batches;
  if (steps_per_epoch_ == 0) {
    const std::string key = plan_.micro_batches_key();
    throw ConfigError("config key '" + key + "': " + std::to_string(plan_.step.micro_batches) +
                      " micro-batches per step exceed the " +
                      std::to_string(parts_.data.train->steps_per_epoch()) +
                      " batches of an epoch");
  }
  total_steps_ = steps_per_epoch_ * config_.train.epochs;
  if (config_.train.max_steps > 0) total_steps_ = std::min(total_steps_, config_.train.max_steps);

  if (info_.runtime.loss_scaling()) loss_scaler_.emplace();
  checkpoints_ = std::make_unique<RunCheckpoints>(
      config_, options_.out_dir, leader(),
      RunCheckpoints::Parts{parts_.layout.get(), parts_.optimizer.get(), parts_.data.train.get(),
                            plan_.data.replica, plan_.step.micro_batches,
                            info_.runtime.torch_device(), loss_scaler_ ? &*loss_scaler_ : nullptr});
  checkpoints_->on_commit([this](const std::string& path, const nlohmann::ordered_json& record) {
    accounting_->write(record);
    if (options_.observer) options_.observer->on_checkpoint(path);
  });
  faults_ = StepFaults::for_rank(rank_, comm::restart_attempt());
  notices_ = start_notices(config_, plan_, total_steps_);

  info_.machine = describe(options_.topology);
  info_.train_samples = parts_.data.train->samples();
  info_.test_samples = parts_.data.test ? parts_.data.test->samples() : 0;
  info_.steps_per_epoch = steps_per_epoch_;
  info_.total_steps = total_steps_;
  info_.epochs = config_.train.epochs;
  info_.tokens_per_sample = parts_.data.input.tokens_per_sample();
  info_.out_dir = options_.out_dir;
}

std::optional<std::string> TrainingRun::resume_if_asked() {
  const std::optional<std::string> latest = checkpoints_->latest(options_.resume);
  if (!latest) return latest;
  const CheckpointData ckpt = checkpoints_->resume_from(*latest);
  position_ = ckpt.position;
  resumed_autotune_json_ = ckpt.autotune_json;
  // A checkpoint written without loss scaling (fp32 or bf16 until then) starts it afresh.
  if (loss_scaler_ && ckpt.loss_scale) loss_scaler_->restore(*ckpt.loss_scale);
  info_.resumed_from_step = position_.step;
  return latest;
}

void TrainingRun::open_run_files(bool resumed) {
  if (leader()) {
    for (const auto& n : notices_) LOOM_LOG(kWarn, "train") << n.evidence << "; " << n.advice;
    replace_file_atomically(options_.out_dir + "/config.yaml", config_to_yaml(config_));
    // The run's own tokenizer, for `loom generate RUN_DIR` wherever the token data goes later.
    if (parts_.data.input.task == models::Task::kLanguageModel) {
      data::copy_tokenizer(config_.data.path, options_.out_dir);
    }
  }
  RunAccountingOptions accounting;
  accounting.out_dir = options_.out_dir;
  accounting.rank = rank_;
  accounting.source = parts_.data.train.get();
  accounting.tokens_per_sample = parts_.data.input.tokens_per_sample();
  accounting.replicas = plan_.data.replicas;
  accounting.topology = options_.topology;
  accounting.ranks_on_host = options_.ranks_on_host;
  accounting.start = start_;
  accounting.cpu_seconds_at_start = cpu_seconds_at_start_;
  accounting.device = info_.runtime.torch_device();
  accounting_ = std::make_unique<RunAccounting>(config_, std::move(accounting));
  accounting_->set_warmup_steps(std::min<int64_t>(5, total_steps_ / 10));
  accounting_->open_metrics(resumed);
  if (!parts_.data.train->worker_stats().empty()) {
    remote_metrics_ = std::make_unique<RemoteWorkerMetrics>(*parts_.data.train);
  }
}

at::Tensor TrainingRun::optimizer_step(int64_t epoch, int64_t step_in_epoch) {
  using profile::Phase;
  accounting_->enter(Phase::kOptimizer);
  // optimizer.lr_scaling: linear scales the whole schedule (its warm-up and min_lr too) with
  // the replicas.
  last_lr_ = plan_.data.lr_scale *
             learning_rate(config_.schedule, config_.optimizer.lr, position_.step, total_steps_);
  set_learning_rate(*parts_.optimizer, last_lr_);
  stepping_epoch_ = epoch;
  stepping_step_ = step_in_epoch;
  const int64_t step = position_.step + 1;
  if (loss_scaler_) {
    // LOOM_FAULT_OVERFLOW_RANK_AT_STEP: this rank's gradients overflow in this step.
    parts_.layout->set_loss_scale(faults_.overflows_in(step)
                                      ? std::numeric_limits<double>::infinity()
                                      : loss_scaler_->scale());
  }
  const parallel::StepOutcome outcome =
      parts_.layout->run_step([&](int64_t k) { return micro_batch(epoch, step_in_epoch, k); });
  position_.samples += outcome.samples * plan_.data.replicas;
  accounting_->enter(Phase::kOptimizer);
  // A step whose every micro-batch was empty (all samples bad) has the loss 0, as its gradients.
  at::Tensor loss =
      outcome.loss_sum.defined()
          ? outcome.loss_sum / static_cast<double>(parts_.layout->micro_batches())
          : at::zeros({},
                      at::TensorOptions().dtype(at::kDouble).device(info_.runtime.torch_device()));
  double factor = 1.0;
  if (parts_.data.loss_masked) {
    factor = counted_targets_factor(outcome);
    loss = loss * factor;
  }
  // Under loss scaling, a step whose gradients overflowed on any rank is skipped by all of them
  // (the scale halves for the next).
  bool steps = true;
  if (loss_scaler_) {
    const bool finite = parts_.layout->unscale_gradients(factor / loss_scaler_->scale());
    steps = loss_scaler_->update(finite, step);
  } else {
    parts_.layout->scale_gradients(factor);
  }
  if (steps && config_.train.grad_clip > 0) parts_.layout->clip_gradients(config_.train.grad_clip);
  // Servers that keep the parameters push and pull here: that is communication the step waits
  // for, around the optimizer's own work. A skipped step still goes through the exchange's own
  // part (ZeRO gathers its unchanged shards), in step with the others.
  accounting_->enter(Phase::kCommExposed);
  parts_.layout->step_optimizer(last_lr_, [&] {
    if (!steps) return;
    accounting_->enter(Phase::kOptimizer);
    parts_.optimizer->step();
    accounting_->enter(Phase::kCommExposed);
  });
  accounting_->enter(Phase::kOptimizer);
  return loss;
}

double TrainingRun::counted_targets_factor(const parallel::StepOutcome& outcome) {
  // Each micro-batch's loss summed its counted targets over all its positions, so that every
  // layout weighs micro-batches alike; this turns the step's mean into one over the counted
  // targets of every replica (as torchtune and Megatron normalise by tokens that count).
  // Every rank of a replica saw the same targets, so the mean over training ranks is the
  // replicas' mean; ranks out of lockstep (asynchronous parameter servers) use their own.
  const auto counted = static_cast<double>(outcome.counted_targets);
  const double mean_counted =
      plan_.lockstep() ? parts_.layout->mean_over_trainers(counted) : counted;
  return mean_counted > 0 ? static_cast<double>(outcome.targets) / mean_counted : 1.0;
}

std::optional<models::SampleKeys> TrainingRun::draw_keys(int64_t k) const {
  // This replica's share of the epoch is every D-th sample (the loader's sharding), read a
  // replica batch a step, a micro-batch at a time.
  const parallel::StepShape& step = plan_.step;
  constexpr uint64_t kDropout = 0x64726f706f7574;  // "dropout": this use of the seed
  models::SampleKeys keys;
  keys.key = hash_key(
      {kDropout, static_cast<uint64_t>(config_.seed), static_cast<uint64_t>(stepping_epoch_)});
  keys.first = stepping_step_ * step.replica_batch + k * step.micro_batch;
  keys.replicas = plan_.data.replicas;
  keys.replica = plan_.data.replica;
  return keys;
}

parallel::MicroBatch TrainingRun::micro_batch(int64_t epoch, int64_t step_in_epoch, int64_t k) {
  const int64_t index = step_in_epoch * parts_.layout->micro_batches() + k;
  watchdog_->waiting_for_batch(epoch, index);
  accounting_->enter(profile::Phase::kDataWait);
  data::Batch batch = parts_.data.train->batch(epoch, index);
  if (batch.size() == 0) return {at::Tensor(), batch.targets};  // every sample was bad
  // Counted here, on the host's copy, so that the step never waits for the device to count.
  const int64_t counted = parts_.data.loss_masked ? parallel::counted_targets(batch.targets) : -1;
  accounting_->enter(profile::Phase::kH2D);
  return {parts_.feeder->to_input(batch.inputs), parts_.feeder->to_device(batch.targets), counted};
}

void TrainingRun::forward_begins() {
  if (!flops_counted_) flop_counter_.emplace();
}

void TrainingRun::forward_ends(int64_t samples) {
  if (!flop_counter_) return;
  forward_flops_per_sample_ = flop_counter_->flops() / static_cast<double>(samples);
  flops_counted_ = true;  // once, even for a model with nothing countable
  flop_counter_.reset();
}

void TrainingRun::settle_losses() {
  // Every rank that steps with this one has as many unread losses: all read, or none.
  if (unread_losses_.empty()) return;
  std::vector<at::Tensor> losses;
  for (const auto& [step, loss] : unread_losses_) losses.push_back(loss);  // double
  const at::Tensor read = at::stack(losses).to(at::kCPU);  // the one wait for the device
  const double* values = read.data_ptr<double>();
  std::optional<std::pair<int64_t, double>> bad;  // the first non-finite: step, value
  for (std::size_t i = 0; i < unread_losses_.size() && !bad; ++i) {
    if (!std::isfinite(values[i])) bad.emplace(unread_losses_[i].first, values[i]);
  }
  const int64_t first_unread = unread_losses_.front().first;
  // Ranks stop together: a rank whose losses were finite stops too (the others' gradients
  // reached its parameters), naming the first step it had not read.
  if (parts_.layout->any_rank(bad.has_value())) {
    const int64_t step = bad ? bad->first : first_unread;
    const std::string value = bad ? std::to_string(bad->second) : "non-finite on another rank";
    throw Error("training: loss is " + value + " at step " + std::to_string(step) + " (epoch " +
                    std::to_string(position_.epoch + 1) +
                    (world_ > 1 ? ", rank " + std::to_string(rank_) : std::string()) +
                    "); stopped. Last good checkpoint: " +
                    (checkpoints_->last().empty() ? std::string("none") : checkpoints_->last()),
                {{"problem", "non_finite_loss"},
                 {"step", std::to_string(step)},
                 {"rank", std::to_string(rank_)},
                 {"checkpoint", checkpoints_->last()}});
  }
  for (std::size_t i = 0; i < unread_losses_.size(); ++i) {
    accounting_->add_loss(values[i]);
    epoch_loss_ += values[i];
    ++epoch_steps_;
  }
  unread_losses_.clear();
}

void TrainingRun::save_checkpoint() {
  // No checkpoint holds a step whose loss was not finite.
  settle_losses();
  const std::string autotune = autotune_ ? autotune_->checkpoint_json() : "";  // resuming keeps it
  const auto progress = [this] { watchdog_->progress(); };
  if (!checkpoints_->save(position_, autotune, progress)) return;
  // LOOM_FAULT_STOP_AFTER_STEP: preempted right after the commit (of a background write too).
  if (!faults_.stops_after(position_.step)) return;
  checkpoints_->finish_writing(progress);
  if (checkpoints_->committed_step() == position_.step) std::raise(SIGKILL);
}

void TrainingRun::train_epoch(int64_t epoch, int64_t first_step) {
  const auto epoch_start = Clock::now();
  epoch_loss_ = 0.0;
  epoch_steps_ = 0;
  const int64_t every = config_.checkpoint.every_steps;
  for (int64_t s = first_step; s < steps_per_epoch_ && position_.step < total_steps_; ++s) {
    watchdog_->begin_step(position_.step + 1);
    accounting_->begin_step();
    const int64_t samples_before = position_.samples;
    at::Tensor loss = optimizer_step(epoch, s);
    faults_.slow_down();
    // Steps run while the autotuner tries settings are not the run's steady state.
    const bool tuning = autotune_ && autotune_->tuning();
    const int64_t samples = position_.samples - samples_before;
    // The loss reaches the window when it is read (settle_losses).
    const double dt =
        accounting_->end_step(position_.step + 1, samples, std::numeric_limits<double>::quiet_NaN(),
                              parts_.layout->exchange_stats(), !tuning);
    ++position_.step;
    position_.step_in_epoch = s + 1;
    if (tuning) autotune_->after_step(position_.step, samples, dt);
    report_step(std::move(loss));
    if (every > 0 && position_.step % every == 0) save_checkpoint();
    checkpoints_->poll();  // a background write that has committed is reported
    faults_.strike_after(position_.step);
    if (stop_requested()) {
      preempted_ = true;
      LOOM_LOG(kWarn, "train") << "rank " << rank_ << ": SIGTERM: stopping after step "
                               << position_.step << " to commit a checkpoint (preempted)";
      break;
    }
  }
  settle_losses();
  // Each rank saw its own share: the epoch's loss is the mean over all of them.
  epoch_loss_ = parts_.layout->mean_over_trainers(epoch_loss_);
  EpochReport r;
  r.epoch = epoch;
  r.epochs = config_.train.epochs;
  r.step = position_.step;
  r.train_loss = epoch_steps_ > 0 ? epoch_loss_ / static_cast<double>(epoch_steps_) : 0.0;
  r.train_loss_steps = epoch_steps_;
  r.first_step = first_step;
  const bool epoch_done = position_.step_in_epoch == steps_per_epoch_;
  if (config_.train.eval && parts_.data.test && !preempted_ &&
      (epoch_done || position_.step == total_steps_)) {
    last_eval_ = evaluate_test();
    r.evaluated = true;
    r.test_loss = last_eval_.loss;
    r.test_accuracy = last_eval_.accuracy;
    if (info_.tokens_per_sample > 0) r.test_perplexity = last_eval_.perplexity();
    checkpoints_->evaluated(position_.step, last_eval_);  // checkpoint.keep_best ranks it
  }
  r.seconds = std::chrono::duration<double>(Clock::now() - epoch_start).count();
  if (epoch_done) {
    position_.epoch = epoch + 1;
    position_.step_in_epoch = 0;
  }
  accounting_->log_epoch(r);
  if (options_.observer) options_.observer->on_epoch(r);
  // checkpoint.keep_best: an evaluation's step has a checkpoint, to keep if it is the best.
  if ((every == 0 && epoch_done) || (r.evaluated && checkpoints_->keeps_best())) {
    save_checkpoint();
  }
}

bool TrainingRun::stop_requested() {
  if (!options_.termination) return false;
  const bool mine = options_.termination->load(std::memory_order_relaxed) != 0;
  watchdog_->enter(Phase::kCommExposed);  // a wait for the other ranks, though between steps
  return parts_.layout->any_rank(mine);
}

void TrainingRun::start_watchdog() {
  StallWatchdogOptions options;
  options.stall_timeout_s = config_.train.stall_timeout_s;
  options.rank = rank_;
  options.world = world_;  // the training ranks (parameter servers publish no heartbeats)
  options.data_source = parts_.data.train->describe_producers();
  options.exchange = parts_.layout->describe_waits();
  options.store = options_.heartbeat_store;
  options.termination = options_.termination;
  options.preempt_grace_s = config_.train.preempt_grace_s;
  watchdog_ = std::make_unique<StallWatchdog>(std::move(options));
  watchdog_->set_resumed_from(std::max<int64_t>(0, info_.resumed_from_step));
  accounting_->set_watchdog(watchdog_.get());
}

void TrainingRun::start_layout() {
  parallel::StartOptions start;
  start.loss = parts_.loss.get();
  start.observer = this;
  start.autocast = info_.runtime.autocast_dtype();
  start.count_targets = parts_.data.loss_masked;
  start.first_step = position_.step;
  start.device = info_.runtime.torch_device();
  start.optimizer_state = [this] {
    return flat_optimizer_state(config_.optimizer, parts_.layout->parameters(),
                                export_optimizer_state(*parts_.optimizer, config_.optimizer.name,
                                                       parts_.layout->parameters()));
  };
  start.release_optimizer_state = [this] { parts_.optimizer->state().clear(); };
  parts_.layout->start(start);
}

TrainSummary TrainingRun::run() {
  set_up();
  // The run's files are written only once the checkpoint has loaded: a resume that is refused,
  // whatever the reason, leaves the folder as it was.
  open_run_files(resume_if_asked().has_value());
  // After resuming, so that rank 0's restored parameters are the ones every rank starts from.
  start_layout();
  start_watchdog();
  if (config_.autotune.enabled) {
    autotune_ = std::make_unique<RunAutotune>(
        RunAutotune::Run{config_, options_, parts_, info_, *accounting_}, position_.step,
        total_steps_ - position_.step, resumed_autotune_json_, checkpoints_->last());
  }
  if (options_.observer) options_.observer->on_start(info_);
  while (!preempted_ && position_.step < total_steps_ && position_.epoch < config_.train.epochs) {
    train_epoch(position_.epoch, position_.step_in_epoch);
  }
  parts_.layout->end_training();
  accounting_->read_device_times();
  save_checkpoint();
  // The end of the run, preempted or not, waits for the checkpoint in flight to commit.
  checkpoints_->finish_writing([this] { watchdog_->progress(); });
  // Parameter servers trace too, as the job's last ranks; end_training() has waited for them.
  accounting_->merge_traces(world_ > 1 ? options_.groups.trainers : nullptr, plan_.world);
  // Resuming a run that had already finished trains nothing: still report its accuracy.
  if (config_.train.eval && parts_.data.test && last_eval_.samples == 0 && !preempted_) {
    last_eval_ = evaluate_test();
  }

  return summarize();
}

TrainSummary train(const Config& config, const TrainOptions& options) {
  // The job: every rank, servers included, when there are parameter servers.
  const comm::Communicator* job =
      options.groups.ps_world ? options.groups.ps_world : options.groups.trainers;
  const RunPlan plan = plan_run(config, job ? job->world() : 1, job ? job->rank() : 0, options);
  const LayoutFactory layouts(config, plan, options);
  TrainingRun run(config, options, layouts);
  return run.run();
}

}  // namespace loom::train
