// A run's checkpoints (checkpoint.*): the store in OUT/checkpoints, resuming from its newest
// committed checkpoint, and saving through the run's layout, which gathers every rank's share
// under the model's own names for rank 0 to commit atomically (other ranks' tensors fetched as
// they are written, where the layout streams them). A checkpoint holds the model, the optimizer
// state, the RNG states, the position and the loader's place, so that a resumed run takes the
// same batches and steps as one that never stopped. A save that fails stops the run, or under
// checkpoint.on_error: warn is counted and the run goes on.
//
// Under checkpoint.async the gather (and the fetch of streamed shares: the other ranks' sends
// complete at the step boundary, as in a synchronous save) ends in host buffers that the writer
// keeps between checkpoints, and a thread writes and commits them while training goes on
// (AsyncCheckpointWriter). A checkpoint waits for the previous one to commit; so do the end of
// the run and a preempted one (finish_writing). Each committed checkpoint is reported with the
// time it held training up and the time it took in the background.
//
// Under checkpoint.keep_best every evaluation's step gets a checkpoint, and the writer keeps the
// one of the best evaluation beside the last checkpoint.keep (KeepBest, best.json), resumed runs
// included.
//
// Threading: the training thread (the writer's own thread only writes the copy).
#pragma once

#include <torch/optim/optimizer.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "loom/core/config.h"
#include "loom/data/batch_source.h"
#include "loom/parallel/parallel_layout.h"
#include "loom/train/async_checkpoint_writer.h"
#include "loom/train/best_checkpoint.h"
#include "loom/train/checkpoint.h"
#include "loom/train/evaluate.h"
#include "loom/train/trainer.h"

namespace loom::train {

class RunCheckpoints {
 public:
  // What a checkpoint holds of the run (not owned).
  struct Parts {
    parallel::ParallelLayout* layout = nullptr;
    torch::optim::Optimizer* optimizer = nullptr;
    data::BatchSource* train = nullptr;  // the training loader, whose place is saved
    int replica = 0;                     // this rank's share of the data
    int64_t micro_batches = 1;           // loader batches per optimizer step
    // Where the model computes: a GPU's generator (torch's own dropout draws from it) is saved
    // and restored with the CPU's.
    c10::Device device = c10::kCPU;
    // fp16's loss scaler, whose state a checkpoint keeps; null without loss scaling.
    const LossScaler* loss_scaler = nullptr;
  };

  // `leader`: this rank writes the checkpoints (and clears what a killed save left).
  RunCheckpoints(const Config& config, const std::string& out_dir, bool leader, Parts parts);
  // Waits for a write in flight (its outcome unreported: the run is ending on an error).
  ~RunCheckpoints() = default;

  // Told of each checkpoint this rank commits, on the training thread once it knows (at once,
  // or after a background write): its path and its "checkpoint" record for metrics.jsonl.
  using CommitSink =
      std::function<void(const std::string& path, const nlohmann::ordered_json& record)>;
  void on_commit(CommitSink sink) { on_commit_ = std::move(sink); }

  // The newest committed checkpoint, when the run resumes; none for a fresh start.
  std::optional<std::string> latest(bool resume) const {
    return resume ? store_.latest() : std::nullopt;
  }

  // Restores the run's parts from `path` (by name: a checkpoint holds the whole model whatever
  // layout wrote it, and this rank takes what it trains). Returns what was read, the position
  // and the autotuner's result among it. Throws ConfigError for another optimizer, DataError
  // for another data sequence or loader position.
  CheckpointData resume_from(const std::string& path);

  // Commits the run at `position`, unless that step was saved (checkpoint.enabled off: nothing);
  // under checkpoint.async, first waits for the previous checkpoint to commit, then copies this
  // one and starts writing it. `autotune_json` goes with it; `progress` tells the stall watchdog
  // the rank is alive. Returns true when this rank committed a checkpoint or started writing one.
  bool save(const TrainPosition& position, const std::string& autotune_json,
            const std::function<void()>& progress);
  // Reports a background write that has ended (once a step). Throws as a failed save does.
  void poll();
  // Waits for the background write in flight and reports it: the end of the run, a preempted
  // one and a testing aid's stop wait here, so that what they saved is committed.
  void finish_writing(const std::function<void()>& progress);

  const std::string& last() const { return last_; }  // committed or resumed from; "" if none
  int64_t committed_step() const { return committed_step_; }  // of last(), on the writer
  int64_t failures() const { return failures_; }  // saves that failed under on_error: warn

  // The summary's part at `position`: the last checkpoint, whether a preempted run (`preempted`)
  // committed its stop step, the failed saves, and the committed checkpoints' times.
  void fill_summary(const TrainPosition& position, bool preempted, TrainSummary& s) const;

  // The training loader's place at `position`: its next batch.
  data::LoaderState loader_state(const TrainPosition& position) const;

  // checkpoint.keep_best is on: each evaluation's step is to have a checkpoint (save() there).
  bool keeps_best() const { return config_.checkpoint.keep_best != "none"; }
  // The evaluation at `step` (the result every rank knows). On the writer, under
  // checkpoint.keep_best, it may make that step's checkpoint the best one (now, or once it is
  // committed). Call it before or after save() at that step.
  void evaluated(int64_t step, const EvalResult& result);

 private:
  // The checkpoint of `step` is committed at `path`: recorded and told.
  void committed(int64_t step, const std::string& path, double blocked_seconds,
                 double background_seconds);
  // A save failed with `error`: stops the run (checkpoint.on_error: stop) or is counted.
  void failed(const std::string& error);
  // The outcome of the background write, if any.
  void report(const std::optional<AsyncWriteResult>& result);
  // Records a new best checkpoint (best.json) and prunes the one it replaces; a failure is a
  // failed save's.
  void record_best(const std::optional<BestCheckpoint>& best);

  const Config& config_;
  const bool leader_;
  Parts parts_;
  CheckpointStore store_;
  std::optional<KeepBest> keep_best_;              // checkpoint.keep_best, on the leader
  std::unique_ptr<AsyncCheckpointWriter> writer_;  // checkpoint.async, on the leader
  double in_flight_blocked_ = 0;                   // how long the write in flight held training up
  CommitSink on_commit_;
  int64_t saved_step_ = -1, committed_step_ = -1, failures_ = 0;
  CheckpointTimes times_;
  std::string last_;
};

}  // namespace loom::train
