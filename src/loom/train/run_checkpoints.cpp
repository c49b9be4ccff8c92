#include "loom/train/run_checkpoints.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>

#include <chrono>

#include "loom/core/error.h"
#include "loom/core/log.h"
#include "loom/core/settings.h"
#include "loom/train/optimizer.h"
#include "loom/train/optimizer_on_servers.h"

namespace loom::train {

RunCheckpoints::RunCheckpoints(const Config& config, const std::string& out_dir, bool leader,
                               Parts parts)
    : config_(config),
      leader_(leader),
      parts_(parts),
      store_(out_dir + "/checkpoints", config.checkpoint.keep,
             setting_int("LOOM_FAULT_KILL_IN_SAVE"), setting_int("LOOM_FAULT_SLOW_SAVE_MS")) {
  if (leader) store_.remove_unfinished();  // what a killed save left behind
  if (leader && config.checkpoint.async) writer_ = std::make_unique<AsyncCheckpointWriter>(store_);
  if (leader && keeps_best()) keep_best_.emplace(config.checkpoint.keep_best);
  times_.async = config.checkpoint.async;
}

void RunCheckpoints::fill_summary(const TrainPosition& position, bool preempted,
                                  TrainSummary& s) const {
  s.last_checkpoint = last_;
  // The writer knows whether the stop step's checkpoint was committed; the other ranks stopped
  // with it and resume from what it wrote.
  s.preempted_checkpoint =
      preempted && config_.checkpoint.enabled && (!leader_ || committed_step_ == position.step);
  s.checkpoint_failures = failures_;
  s.checkpoint_times = times_;
  if (keep_best_) s.best_checkpoint = keep_best_->best();
}

data::LoaderState RunCheckpoints::loader_state(const TrainPosition& position) const {
  data::LoaderState state = parts_.train->identity();
  state.epoch = position.epoch;
  state.step = position.step_in_epoch * parts_.micro_batches;
  return state;
}

CheckpointData RunCheckpoints::resume_from(const std::string& path) {
  parallel::ParallelLayout& layout = *parts_.layout;
  CheckpointData ckpt = CheckpointStore::load(path);
  if (ckpt.optimizer_kind != config_.optimizer.name) {
    throw ConfigError("config key 'optimizer.name' is '" + config_.optimizer.name +
                      "' but checkpoint '" + path + "' was written by '" + ckpt.optimizer_kind +
                      "'");
  }
  CheckpointData own = ckpt;
  own.model = layout.own_model_state(ckpt.model);
  restore_model(own, path, layout.parameters(), layout.buffers());
  import_optimizer_state(*parts_.optimizer, ckpt.optimizer_kind, layout.optimized_parameters(),
                         layout.own_optimizer_state(ckpt.optimizer));
  if (ckpt.layout_json != layout.manifest_json()) {
    LOOM_LOG(kInfo, "checkpoint") << "resuming " << path << ", written as " << ckpt.layout_json
                                  << ", as " << layout.manifest_json();
  }
  at::Generator generator = at::detail::getDefaultCPUGenerator();  // a handle to the default
  parallel::CheckpointTensors saved;
  saved.rng = ckpt.rng_state;
  saved.rank_rngs = ckpt.rank_rng_states;
  generator.set_state(layout.own_rng(saved));
  // A GPU's generator continues where the checkpoint's left off; one written on the CPU (or
  // before GPU generators were saved) leaves it as seeded, and a GPU's state means nothing to a
  // run on the CPU.
  if (ckpt.device_rng_state.defined() && parts_.device.is_cuda()) {
    at::Generator device_generator = at::globalContext().defaultGenerator(parts_.device);
    device_generator.set_state(ckpt.device_rng_state);
  }
  if (ckpt.loader) {
    // The batches are a pure function of (epoch, step): the same identity and position give the
    // same samples, for any number of loader threads. Rank 0 wrote the checkpoint; every rank
    // stands at the same position of its own share.
    ckpt.loader->rank = parts_.replica;
    check_same_sequence(*ckpt.loader, parts_.train->identity(), path);
    const data::LoaderState expected = loader_state(ckpt.position);
    if (ckpt.loader->epoch != expected.epoch || ckpt.loader->step != expected.step) {
      throw DataError("checkpoint '" + path + "': the loader stood at batch " +
                      std::to_string(ckpt.loader->step) + " of epoch " +
                      std::to_string(ckpt.loader->epoch + 1) + " but training at batch " +
                      std::to_string(expected.step) + " (train.grad_accum changed?)");
    }
    parts_.train->seek(ckpt.loader->epoch, ckpt.loader->step);
  }
  saved_step_ = committed_step_ = ckpt.position.step;
  last_ = path;
  // The best so far stays kept, and later evaluations are ranked against it.
  if (keep_best_) {
    if (const auto best = store_.recorded_best(); best && best->metric == keep_best_->metric()) {
      keep_best_->resume(*best);
      store_.spare(best->path);
    } else if (best) {
      LOOM_LOG(kInfo, "checkpoint")
          << "the best checkpoint so far, " << best->path << ", was ranked by " << best->metric
          << ", not " << keep_best_->metric() << ": it is no longer kept";
    }
  }
  return ckpt;
}

bool RunCheckpoints::save(const TrainPosition& position, const std::string& autotune_json,
                          const std::function<void()>& progress) {
  if (!config_.checkpoint.enabled || saved_step_ == position.step) return false;
  saved_step_ = position.step;
  parallel::ParallelLayout& layout = *parts_.layout;
  // Data-parallel replicas hold what the first one holds.
  if (!layout.takes_part_in_checkpoints()) return false;
  const auto begin = std::chrono::steady_clock::now();
  const auto held_up = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  };
  // The previous checkpoint commits first: its host buffers are this one's.
  if (writer_) report(writer_->wait());
  parallel::CheckpointTensors mine;
  // Servers that keep the optimizer state send it, and their latest parameters with it.
  const models::NamedTensors& parameters = layout.parameters();
  if (auto held = layout.grad_sync().held_optimizer_state()) {
    mine.optimizer = named_optimizer_state(config_.optimizer, parameters, *held);
  } else {
    mine.optimizer = export_optimizer_state(*parts_.optimizer, config_.optimizer.name,
                                            layout.optimized_parameters());
  }
  mine.model = parameters;
  mine.model.insert(mine.model.end(), layout.buffers().begin(), layout.buffers().end());
  mine.rng = at::detail::getDefaultCPUGenerator().get_state();
  std::optional<parallel::CheckpointTensors> whole = layout.gather_for_writing(std::move(mine));
  if (!whole) return false;
  CheckpointData ckpt;
  ckpt.model = std::move(whole->model);
  ckpt.optimizer = std::move(whole->optimizer);
  ckpt.model_to_fetch = std::move(whole->model_to_fetch);
  ckpt.optimizer_to_fetch = std::move(whole->optimizer_to_fetch);
  ckpt.rng_state = whole->rng;
  ckpt.rank_rng_states = std::move(whole->rank_rngs);
  if (parts_.device.is_cuda()) {
    ckpt.device_rng_state = at::globalContext().defaultGenerator(parts_.device).get_state();
  }
  ckpt.position = position;
  if (parts_.loss_scaler) ckpt.loss_scale = parts_.loss_scaler->state();
  ckpt.loader = loader_state(position);
  ckpt.optimizer_kind = config_.optimizer.name;
  ckpt.layout_json = layout.manifest_json();
  ckpt.config_json = config_to_json(config_);
  ckpt.autotune_json = autotune_json;
  progress();
  if (writer_) {
    // Copied (the other ranks' shares fetched) at the step boundary; written in the background.
    try {
      writer_->start(std::move(ckpt));
    } catch (...) {
      try {
        if (whole->finish) whole->finish();
      } catch (const std::exception& e) {
        LOOM_LOG(kWarn, "checkpoint") << "after a failed copy: " << e.what();
      }
      throw;
    }
    if (whole->finish) whole->finish();
    in_flight_blocked_ = held_up();
    progress();
    return true;
  }
  std::string path;
  try {
    path = store_.save(ckpt);
  } catch (const Error& e) {
    // The other ranks' sends complete whatever happened to the write.
    if (whole->finish) whole->finish();
    failed(e.what());
    return false;
  }
  if (whole->finish) whole->finish();
  progress();
  committed(position.step, path, held_up(), 0.0);
  return true;
}

void RunCheckpoints::poll() {
  if (writer_) report(writer_->poll());
}

void RunCheckpoints::finish_writing(const std::function<void()>& progress) {
  if (!writer_ || !writer_->pending()) return;
  report(writer_->wait());
  progress();
}

void RunCheckpoints::report(const std::optional<AsyncWriteResult>& result) {
  if (!result) return;
  if (!result->committed()) return failed(result->error);
  committed(result->step, result->path, in_flight_blocked_, result->background_seconds);
}

void RunCheckpoints::committed(int64_t step, const std::string& path, double blocked_seconds,
                               double background_seconds) {
  last_ = path;
  committed_step_ = step;
  times_.add(blocked_seconds, background_seconds);
  if (keep_best_) record_best(keep_best_->committed(step, path));
  if (!on_commit_) return;
  on_commit_(path, {{"type", "checkpoint"},
                    {"step", step},
                    {"path", path},
                    {"async", writer_ != nullptr},
                    {"blocked_seconds", blocked_seconds},
                    {"background_seconds", background_seconds}});
}

void RunCheckpoints::evaluated(int64_t step, const EvalResult& result) {
  if (keep_best_) record_best(keep_best_->evaluated(step, keep_best_->value_of(result)));
}

void RunCheckpoints::record_best(const std::optional<BestCheckpoint>& best) {
  if (!best) return;
  // Called after a write has been reported, or at an evaluation whose step's checkpoint was
  // already reported: no background write is in flight while the store prunes.
  try {
    store_.set_best(*best);
  } catch (const std::exception& e) {
    failed("recording the best checkpoint " + best->path + ": " + e.what());
    return;
  }
  LOOM_LOG(kInfo, "checkpoint") << "best so far: " << best->path << " (" << best->metric << " "
                                << best->value << " at step " << best->step << ")";
}

void RunCheckpoints::failed(const std::string& error) {
  if (config_.checkpoint.on_error == "stop") {
    throw Error(error + "; stopped (checkpoint.on_error: stop)");
  }
  ++failures_;
  LOOM_LOG(kWarn, "checkpoint") << error << "; training goes on (checkpoint.on_error: warn)";
}

}  // namespace loom::train
