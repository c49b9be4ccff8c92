#include "loom/train/trainer.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <torch/nn/utils/clip_grad.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <optional>
#include <thread>

#include "loom/comm/rendezvous.h"
#include "loom/core/caching_allocator.h"
#include "loom/core/error.h"
#include "loom/core/log.h"
#include "loom/core/settings.h"
#include "loom/models/model.h"
#include "loom/parallel/accumulating_executor.h"
#include "loom/parallel/local_grad_sync.h"
#include "loom/profile/flops.h"
#include "loom/train/data_parallel_run.h"
#include "loom/train/durable_file.h"
#include "loom/train/optimizer.h"
#include "loom/train/schedule.h"
#include "loom/train/server_optimizer.h"
#include "loom/train/train_data.h"
#include "loom/train/training_run.h"

namespace loom::train {
namespace {

// A testing aid's "RANK:NUMBER" (LOOM_FAULT_SLOW_RANK and the like); nullopt when unset.
std::optional<std::pair<int, int64_t>> rank_and_number(const char* name) {
  const std::string text = setting(name);
  if (text.empty()) return std::nullopt;
  const auto colon = text.find(':');
  try {
    if (colon == std::string::npos) throw std::invalid_argument(text);
    return std::make_pair(std::stoi(text.substr(0, colon)), std::stoll(text.substr(colon + 1)));
  } catch (const std::exception&) {
    throw ConfigError(std::string(name) + ": '" + text + "' is not RANK:NUMBER");
  }
}

}  // namespace

void TrainingRun::set_up() {
  std::filesystem::create_directories(options_.out_dir);
  use_configured_allocator(config_.runtime.allocator, options_.topology.memory_bytes);
  at::manual_seed(static_cast<uint64_t>(config_.seed));
  // The stages of one pipeline read one share of the data (stage 0 feeds it).
  data_ = load_train_data(config_, options_.topology.usable_cores, replica_, replicas_);
  data_.train->set_epoch_limit(config_.train.epochs);
  model_ = models::make_model(config_.model, data_.input);
  info_.runtime = choose_runtime(config_.runtime, options_.topology, model_->is_convolutional(),
                                 at::hasMKLDNN());
  at::set_num_threads(info_.runtime.threads);
  if (const BlasLibrary blas = loaded_blas_library(); blas.reference() && !info_.runtime.bf16() &&
                                                      leader()) {
    LOOM_LOG(kWarn, "runtime") << "fp32 matrix products run on netlib's reference BLAS ("
                               << blas.path << "), 16-30x slower than OpenBLAS: install "
                               << kFastBlasPackage;
  }
  const auto format = info_.runtime.memory_format == "channels_last"
                          ? at::MemoryFormat::ChannelsLast
                          : at::MemoryFormat::Contiguous;
  model_->set_memory_format(format);
  model_->train(true);
  info_.parameters = model_->parameter_count();  // before a pipeline releases others' stages
  if (pipeline_) {
    join_pipeline_groups();
    stages_ = parallel::pipeline::stage_blocks(model_->blocks(), pipeline_->split);
    StageTensors own = keep_own_stages(stages_, pipeline_->schedule, pipeline_comm().rank());
    parameters_ = std::move(own.parameters);
    buffers_ = std::move(own.buffers);
    info_.pipeline_plan = pipeline_->plan_text;
  } else {
    parameters_ = model_->named_parameters();
    buffers_ = model_->named_buffers();
  }
  optimizer_ = make_optimizer(config_.optimizer, parameters_);
  loss_ = std::make_unique<models::CrossEntropyLoss>(config_.train.label_smoothing);
  eval_loss_ = std::make_unique<models::CrossEntropyLoss>();
  feeder_ = std::make_unique<data::Feeder>(data_.stats, format);

  steps_per_epoch_ = data_.train->steps_per_epoch() / config_.train.grad_accum;
  if (steps_per_epoch_ == 0) {
    const std::string key = pipeline_ ? "parallel.pipeline.microbatches" : "train.grad_accum";
    throw ConfigError("config key '" + key + "': " + std::to_string(config_.train.grad_accum) +
                      " micro-batches per step exceed the " +
                      std::to_string(data_.train->steps_per_epoch()) + " batches of an epoch");
  }
  total_steps_ = steps_per_epoch_ * config_.train.epochs;
  if (config_.train.max_steps > 0) total_steps_ = std::min(total_steps_, config_.train.max_steps);
  warmup_steps_ = std::min<int64_t>(5, total_steps_ / 10);

  store_ =
      std::make_unique<CheckpointStore>(options_.out_dir + "/checkpoints", config_.checkpoint.keep,
                                        setting_int("LOOM_FAULT_KILL_IN_SAVE"));
  stop_after_step_ = setting_int("LOOM_FAULT_STOP_AFTER_STEP");
  lockstep_ = !options_.ps_world || config_.parallel.ps.mode == "sync";
  if (const auto slow = rank_and_number("LOOM_FAULT_SLOW_RANK"); slow && slow->first == rank_) {
    slow_by_ = std::chrono::milliseconds(slow->second);
  }
  // A restarted attempt passes the step again: the kill strikes the first attempt only.
  if (const auto kill = rank_and_number("LOOM_FAULT_KILL_RANK_AFTER_STEP");
      kill && kill->first == rank_ && comm::restart_attempt() == 0) {
    kill_after_step_ = kill->second;
  }
  if (const auto freeze = rank_and_number("LOOM_FAULT_FREEZE_RANK_AFTER_STEP");
      freeze && freeze->first == rank_) {
    freeze_after_step_ = freeze->second;
  }
  if (leader()) {
    store_->remove_unfinished();  // what a killed save left behind
    replace_file_atomically(options_.out_dir + "/config.yaml", config_to_yaml(config_));
  }
  telemetry_ = std::make_unique<StepTelemetry>(config_, options_.out_dir, *data_.train, rank_);
  if (const auto* remote = dynamic_cast<const data::RemoteBatchSource*>(data_.train.get())) {
    remote_metrics_ = std::make_unique<RemoteWorkerMetrics>(*remote);
  }
  if (options_.ps_world && leader()) server_metrics_ = std::make_unique<ServerMetrics>();

  info_.model = model_->name();
  info_.machine = describe(options_.topology);
  info_.train_samples = data_.train->samples();
  info_.test_samples = data_.test ? data_.test->samples() : 0;
  info_.steps_per_epoch = steps_per_epoch_;
  info_.total_steps = total_steps_;
  info_.epochs = config_.train.epochs;
  info_.out_dir = options_.out_dir;
}

void TrainingRun::resume_if_asked() {
  const std::optional<std::string> latest = options_.resume ? store_->latest() : std::nullopt;
  if (leader()) {
    metrics_ =
        std::make_unique<MetricsLog>(options_.out_dir + "/metrics.jsonl", latest.has_value());
  }
  if (!latest) return;
  const std::string& path = *latest;
  CheckpointData ckpt = CheckpointStore::load(path);
  if (ckpt.optimizer_kind != config_.optimizer.name) {
    throw ConfigError("config key 'optimizer.name' is '" + config_.optimizer.name +
                      "' but checkpoint '" + path + "' was written by '" + ckpt.optimizer_kind +
                      "'");
  }
  // By name: a checkpoint holds the whole model whatever layout wrote it, and this rank takes
  // what it trains (all of it, or its pipeline stages).
  restore_model(ckpt, path, parameters_, buffers_);
  import_optimizer_state(*optimizer_, ckpt.optimizer_kind, parameters_, ckpt.optimizer);
  if (ckpt.layout_json != layout_json().dump()) {
    LOOM_LOG(kInfo, "checkpoint") << "resuming " << path << ", written as " << ckpt.layout_json
                                  << ", as " << layout_json().dump();
  }
  at::Generator generator = at::detail::getDefaultCPUGenerator();  // a handle to the default
  // A pipeline rank's own generator (the same for that stage in every replica).
  const auto own_rng =
      pipeline_ ? ckpt.rank_rng_states.find(pipeline_comm().rank()) : ckpt.rank_rng_states.end();
  generator.set_state(own_rng != ckpt.rank_rng_states.end() ? own_rng->second : ckpt.rng_state);
  position_ = ckpt.position;
  if (ckpt.loader) {
    // The batches are a pure function of (epoch, step): the same identity and position give the
    // same samples, for any number of loader threads. Rank 0 wrote the checkpoint; every rank
    // stands at the same position of its own share.
    ckpt.loader->rank = replica_;
    check_same_sequence(*ckpt.loader, data_.train->identity(), path);
    const data::LoaderState expected = loader_state();
    if (ckpt.loader->epoch != expected.epoch || ckpt.loader->step != expected.step) {
      throw DataError("checkpoint '" + path + "': the loader stood at batch " +
                      std::to_string(ckpt.loader->step) + " of epoch " +
                      std::to_string(ckpt.loader->epoch + 1) + " but training at batch " +
                      std::to_string(expected.step) + " (train.grad_accum changed?)");
    }
    data_.train->seek(ckpt.loader->epoch, ckpt.loader->step);
  }
  last_saved_step_ = position_.step;
  last_checkpoint_ = path;
  committed_step_ = position_.step;
  resumed_autotune_json_ = ckpt.autotune_json;
  info_.resumed_from_step = position_.step;
}

double TrainingRun::optimizer_step(int64_t epoch, int64_t step_in_epoch) {
  using profile::Phase;
  telemetry_->enter(Phase::kOptimizer);
  last_lr_ = learning_rate(config_.schedule, config_.optimizer.lr, position_.step, total_steps_);
  set_learning_rate(*optimizer_, last_lr_);
  const parallel::StepOutcome outcome =
      executor_->run([&](int64_t k) { return micro_batch(epoch, step_in_epoch, k); });
  position_.samples += outcome.samples * replicas_;
  telemetry_->enter(Phase::kOptimizer);
  if (config_.train.grad_clip > 0 && pipeline_) {
    clip_grad_norm_across(parameters_, config_.train.grad_clip, pipeline_comm());
  } else if (config_.train.grad_clip > 0) {
    torch::nn::utils::clip_grad_norm_(optimizer_->param_groups()[0].params(),
                                      config_.train.grad_clip);
  }
  // Servers that keep the parameters push and pull here: that is communication the step waits
  // for, around the optimizer's own work.
  telemetry_->enter(Phase::kCommExposed);
  grad_sync_->step(last_lr_, [&] {
    telemetry_->enter(Phase::kOptimizer);
    optimizer_->step();
    telemetry_->enter(Phase::kCommExposed);
  });
  telemetry_->enter(Phase::kOptimizer);
  return outcome.loss_sum / static_cast<double>(executor_->micro_batches());
}

parallel::MicroBatch TrainingRun::micro_batch(int64_t epoch, int64_t step_in_epoch, int64_t k) {
  const int64_t index = step_in_epoch * executor_->micro_batches() + k;
  watchdog_->waiting_for_batch(epoch, index);
  telemetry_->enter(profile::Phase::kDataWait);
  data::Batch batch = data_.train->batch(epoch, index);
  if (batch.labels.size(0) == 0) return {at::Tensor(), batch.labels};  // every sample was bad
  telemetry_->enter(profile::Phase::kH2D);
  return {feeder_->to_input(batch.images), batch.labels};
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

void TrainingRun::loss_computed(double value) {
  if (std::isfinite(value)) return;
  throw Error("training: loss is " + std::to_string(value) + " at step " +
              std::to_string(position_.step + 1) + " (epoch " +
              std::to_string(position_.epoch + 1) +
              (world_ > 1 ? ", rank " + std::to_string(rank_) : std::string()) +
              "); stopped. Last good checkpoint: " +
              (last_checkpoint_.empty() ? std::string("none") : last_checkpoint_));
}

data::LoaderState TrainingRun::loader_state() const {
  data::LoaderState state = data_.train->identity();
  state.epoch = position_.epoch;
  state.step = position_.step_in_epoch * config_.train.grad_accum;
  return state;
}

nlohmann::ordered_json TrainingRun::layout_json() const {
  nlohmann::ordered_json layout = {{"ranks", world_}, {"data_parallel", replicas_}};
  if (pipeline_) {
    const auto& schedule = pipeline_->schedule;
    layout["pipeline"] = {{"ranks", schedule.ranks},
                          {"stages", schedule.stages},
                          {"schedule", schedule.name},
                          {"microbatches", schedule.microbatches},
                          {"split", pipeline_->split}};
  }
  return layout;
}

void TrainingRun::save_checkpoint() {
  if (!config_.checkpoint.enabled || last_saved_step_ == position_.step) return;
  // Data-parallel replicas hold what the first one holds.
  if (!leader() && (!pipeline_ || replica_ > 0)) {
    last_saved_step_ = position_.step;
    return;
  }
  CheckpointData ckpt;
  // Servers that keep the optimizer state send it, and their latest parameters with it.
  if (auto held = grad_sync_->held_optimizer_state()) {
    ckpt.optimizer = named_optimizer_state(config_.optimizer, parameters_, *held);
  } else {
    ckpt.optimizer = export_optimizer_state(*optimizer_, config_.optimizer.name, parameters_);
  }
  ckpt.model = parameters_;
  ckpt.model.insert(ckpt.model.end(), buffers_.begin(), buffers_.end());
  ckpt.rng_state = at::detail::getDefaultCPUGenerator().get_state();
  if (pipeline_) {
    // Every stage's tensors under the model's names, on rank 0, which writes them as one model.
    auto& comm = pipeline_comm();
    ckpt.model = gather_on_rank0(comm, ckpt.model);
    ckpt.optimizer = gather_on_rank0(comm, ckpt.optimizer);
    const models::NamedTensors rng =
        gather_on_rank0(comm, {{std::to_string(comm.rank()), ckpt.rng_state}});
    if (!leader()) {
      last_saved_step_ = position_.step;
      return;
    }
    for (const auto& [r, state] : rng) ckpt.rank_rng_states[std::stoi(r)] = state;
  }
  ckpt.position = position_;
  ckpt.loader = loader_state();
  ckpt.optimizer_kind = config_.optimizer.name;
  ckpt.layout_json = layout_json().dump();
  ckpt.config_json = config_to_json(config_);
  if (autotune_ && !autotune_->tuning() && autotune_->result()) {
    ckpt.autotune_json = autotune_json(*autotune_->result()).dump();  // resuming keeps it
  }
  watchdog_->progress();
  try {
    last_checkpoint_ = store_->save(ckpt);
  } catch (const Error& e) {
    if (config_.checkpoint.on_error == "stop") {
      throw Error(std::string(e.what()) + "; stopped (checkpoint.on_error: stop)");
    }
    ++checkpoint_failures_;
    LOOM_LOG(kWarn, "checkpoint") << e.what() << "; training goes on (checkpoint.on_error: warn)";
    last_saved_step_ = position_.step;
    return;
  }
  watchdog_->progress();
  last_saved_step_ = committed_step_ = position_.step;
  if (options_.observer) options_.observer->on_checkpoint(last_checkpoint_);
  if (stop_after_step_ > 0 && position_.step == stop_after_step_) {
    std::raise(SIGKILL);  // LOOM_FAULT_STOP_AFTER_STEP: preempted right after a commit
  }
}

void TrainingRun::train_epoch(int64_t epoch, int64_t first_step) {
  const auto epoch_start = Clock::now();
  epoch_loss_ = 0.0;
  epoch_steps_ = 0;
  const int64_t every = config_.checkpoint.every_steps;
  for (int64_t s = first_step; s < steps_per_epoch_ && position_.step < total_steps_; ++s) {
    watchdog_->begin_step(position_.step + 1);
    telemetry_->begin_step(steps_this_process_);
    const int64_t samples_before = position_.samples;
    const double loss = optimizer_step(epoch, s);
    if (slow_by_.count() > 0) std::this_thread::sleep_for(slow_by_);  // LOOM_FAULT_SLOW_RANK
    // Steps run while the autotuner tries settings are not the run's steady state.
    const bool tuning = autotune_ && autotune_->tuning();
    const bool steady = !tuning && steps_this_process_ + 1 > warmup_steps_;
    const double dt = telemetry_->end_step(position_.step + 1, steady).wall;
    ++position_.step;
    position_.step_in_epoch = s + 1;
    ++steps_this_process_;
    window_seconds_ += dt;
    window_comm_seconds_ += grad_sync_->last_stats().comm_seconds;
    window_comm_exposed_ += grad_sync_->last_stats().exposed_seconds;
    window_staleness_ = std::max(window_staleness_, grad_sync_->last_stats().staleness);
    window_samples_ += position_.samples - samples_before;
    if (tuning) {
      autotune_->after_step(position_.samples - samples_before, dt);
      if (!autotune_->tuning()) finish_autotune();
    }
    if (steady) {
      steady_seconds_ += dt;
      steady_samples_ += position_.samples - samples_before;
      const auto& sync = grad_sync_->last_stats();
      comm_seconds_ += sync.comm_seconds;
      comm_exposed_ += sync.exposed_seconds;
      comm_bytes_ += static_cast<double>(sync.bytes);
      ++comm_steps_;
    }
    report_step(loss);
    if (every > 0 && position_.step % every == 0) save_checkpoint();
    inject_step_faults();
    if (stop_requested()) {
      preempted_ = true;
      LOOM_LOG(kWarn, "train") << "rank " << rank_ << ": SIGTERM: stopping after step "
                               << position_.step << " to commit a checkpoint (preempted)";
      break;
    }
  }
  // Each rank saw its own share: the epoch's loss is the mean over all of them.
  if (replicas_ > 1) epoch_loss_ = mean_over_ranks(epoch_loss_);
  EpochReport r;
  r.epoch = epoch;
  r.epochs = config_.train.epochs;
  r.step = position_.step;
  r.train_loss = epoch_steps_ > 0 ? epoch_loss_ / static_cast<double>(epoch_steps_) : 0.0;
  const bool epoch_done = position_.step_in_epoch == steps_per_epoch_;
  if (config_.train.eval && data_.test && !preempted_ &&
      (epoch_done || position_.step == total_steps_)) {
    last_eval_ = evaluate_test();
    r.evaluated = true;
    r.test_loss = last_eval_.loss;
    r.test_accuracy = last_eval_.accuracy;
  }
  r.seconds = seconds_since(epoch_start);
  if (epoch_done) {
    position_.epoch = epoch + 1;
    position_.step_in_epoch = 0;
  }
  nlohmann::ordered_json record = {{"type", "epoch"},
                                   {"epoch", epoch + 1},
                                   {"step", r.step},
                                   {"train_loss", r.train_loss},
                                   {"seconds", r.seconds}};
  if (r.evaluated) {
    record["test_loss"] = r.test_loss;
    record["test_accuracy"] = r.test_accuracy;
    telemetry_->log_eval(r.step, r.test_loss, r.test_accuracy);
  }
  write_metrics(record);
  if (options_.observer) options_.observer->on_epoch(r);
  if (every == 0 && epoch_done) save_checkpoint();
}

bool TrainingRun::stop_requested() {
  if (!options_.termination) return false;
  const bool mine = options_.termination->load(std::memory_order_relaxed) != 0;
  // Ranks that do not step together (async or SSP parameter servers) each stop at their own
  // next step; the checkpoint then holds rank 0's position, as every such checkpoint does.
  if (world_ == 1 || !lockstep_) return mine;
  at::Tensor asked = at::full({1}, mine ? 1.0f : 0.0f);
  auto& comm = *options_.communicator;
  watchdog_->enter(Phase::kCommExposed);  // a wait for the other ranks, though between steps
  comm.allreduce(asked, comm::ReduceOp::kSum)->wait(comm.options().timeout);
  return asked.item<float>() > 0;
}

void TrainingRun::inject_step_faults() {
  if (position_.step == kill_after_step_) std::raise(SIGKILL);
  if (position_.step == freeze_after_step_) std::raise(SIGSTOP);
}

void TrainingRun::start_watchdog() {
  StallWatchdogOptions options;
  options.stall_timeout_s = config_.train.stall_timeout_s;
  options.rank = rank_;
  options.world = world_;  // the training ranks (parameter servers publish no heartbeats)
  if (dynamic_cast<const data::RemoteBatchSource*>(data_.train.get())) {
    std::string workers;
    for (const auto& w : config_.data.remote.workers) workers += (workers.empty() ? "" : ", ") + w;
    options.data_source = "the remote data workers (" + workers + ") and local loader threads";
  } else {
    options.data_source = "the local loader (" + std::to_string(data_.loader_threads) + " threads)";
  }
  options.exchange = grad_sync_->describe() +
                     (pipeline_ ? " and the pipeline's neighbouring stages" : std::string());
  options.store = options_.heartbeat_store;
  options.termination = options_.termination;
  options.preempt_grace_s = config_.train.preempt_grace_s;
  watchdog_ = std::make_unique<StallWatchdog>(std::move(options));
  watchdog_->set_resumed_from(std::max<int64_t>(0, info_.resumed_from_step));
  telemetry_->set_watchdog(watchdog_.get());
}

void TrainingRun::join_pipeline_groups() {
  const int stages = pipeline_->schedule.ranks;
  if (replicas_ == 1) return;  // the pipeline is the whole job
  if (!options_.make_group) {
    throw Error("training: a pipeline x data-parallel run needs communicator groups");
  }
  // Every rank joins its pipeline first, then its stage's replicas: the groups of each round
  // are disjoint, so no rank waits on one that is busy joining another.
  std::vector<int> pipeline_ranks, replica_ranks;
  for (int p = 0; p < stages; ++p) pipeline_ranks.push_back(replica_ * stages + p);
  for (int d = 0; d < replicas_; ++d) replica_ranks.push_back(d * stages + rank_ % stages);
  pipeline_group_ = options_.make_group(pipeline_ranks, "pipeline" + std::to_string(replica_));
  replica_group_ = options_.make_group(replica_ranks, "stage" + std::to_string(rank_ % stages));
}

void TrainingRun::make_executor() {
  parallel::StepObserver& observer = *this;
  if (pipeline_) {
    // Each stage's gradients are summed over the pipelines (replicas), from its last backward.
    grad_sync_ = make_grad_sync(parameters_, buffers_, replica_group_.get(), config_.parallel);
    parallel::pipeline::PipelineExecutorOptions options;
    options.bf16 = info_.runtime.bf16();
    auto executor = std::make_unique<parallel::pipeline::PipelineExecutor>(
        pipeline_->schedule, stages_, *loss_, *grad_sync_, pipeline_comm(), observer, options);
    pipeline_executor_ = executor.get();
    executor_ = std::move(executor);
    return;
  }
  if (options_.ps_world && servers_hold_parameters(config_.parallel.ps)) {
    // Worker 0's parameters (and a resumed run's optimizer state) go to the servers, which keep
    // them from now on; the local optimizer then holds nothing.
    std::optional<parallel::HeldOptimizerState> state;
    if (leader()) {
      state = flat_optimizer_state(
          config_.optimizer, parameters_,
          export_optimizer_state(*optimizer_, config_.optimizer.name, parameters_));
    }
    if (config_.parallel.ps.optimizer_on == "server") optimizer_->state().clear();
    grad_sync_ = make_remote_parameters(model_->named_parameters(), model_->named_buffers(),
                                        *options_.communicator, config_, *options_.ps_world,
                                        options_.ps, position_.step, std::move(state));
  } else {
    grad_sync_ =
        make_grad_sync(model_->named_parameters(), model_->named_buffers(), options_.communicator,
                       config_.parallel, options_.ps_world, options_.ps);
  }
  parallel::AccumulatingOptions step;
  step.micro_batches = config_.train.grad_accum;
  step.bf16 = info_.runtime.bf16();
  executor_ = std::make_unique<parallel::AccumulatingExecutor>(*model_, *loss_, *grad_sync_,
                                                               observer, step);
}

TrainSummary TrainingRun::run() {
  set_up();
  resume_if_asked();
  // After resuming, so that rank 0's restored parameters are the ones every rank starts from.
  make_executor();
  start_watchdog();
  // A pipeline's ranks report the memory their stages take while training, not rank 0's
  // planning of the whole model.
  if (const CachingCpuAllocator* a = installed_caching_cpu_allocator(); a && pipeline_) {
    a->reset_peak();
  }
  if (config_.autotune.enabled) start_autotune();
  if (options_.observer) options_.observer->on_start(info_);
  while (!preempted_ && position_.step < total_steps_ && position_.epoch < config_.train.epochs) {
    train_epoch(position_.epoch, position_.step_in_epoch);
  }
  grad_sync_->end_training();
  save_checkpoint();
  // Parameter servers trace too, as the job's last ranks; end_training() has waited for them.
  const int traced_ranks = options_.ps_world ? options_.ps_world->world() : world_;
  if (traced_ranks > 1 && config_.profile.trace) {
    // One trace with a process per rank: rank 0 takes the others' events once all are done.
    if (world_ > 1) {
      auto& comm = *options_.communicator;
      comm.barrier()->wait(comm.options().timeout);
    }
    if (leader()) telemetry_->merge_rank_traces(options_.out_dir, traced_ranks);
  }
  // Resuming a run that had already finished trains nothing: still report its accuracy.
  if (config_.train.eval && data_.test && last_eval_.samples == 0 && !preempted_) {
    last_eval_ = evaluate_test();
  }

  return summarize();
}

TrainSummary train(const Config& config, const TrainOptions& options) {
  const int world = options.communicator ? options.communicator->world() : 1;
  if (config.parallel.pipeline.stages > 1) {
    const Config rank_config = config_for_pipeline(config, world);
    PipelineLayout layout =
        agree_on_pipeline_layout(rank_config, options.topology, *options.communicator);
    TrainingRun run(rank_config, options, std::move(layout));
    return run.run();
  }
  TrainingRun run(config_for_rank(config, world), options);
  return run.run();
}

}  // namespace loom::train
