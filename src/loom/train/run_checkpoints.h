// A run's checkpoints (checkpoint.*): the store in OUT/checkpoints, resuming from its newest
// committed checkpoint, and saving through the run's layout, which gathers every rank's share
// under the model's own names for rank 0 to commit atomically (other ranks' tensors fetched as
// they are written, where the layout streams them). A checkpoint holds the model, the optimizer
// state, the RNG states, the position and the loader's place, so that a resumed run takes the
// same batches and steps as one that never stopped. A save that fails stops the run, or under
// checkpoint.on_error: warn is counted and the run goes on.
//
// Threading: the training thread.
#pragma once

#include <torch/optim/optimizer.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "loom/core/config.h"
#include "loom/data/batch_source.h"
#include "loom/parallel/parallel_layout.h"
#include "loom/train/checkpoint.h"
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
  };

  // `leader`: this rank writes the checkpoints (and clears what a killed save left).
  RunCheckpoints(const Config& config, const std::string& out_dir, bool leader, Parts parts);

  // The newest committed checkpoint, when the run resumes; none for a fresh start.
  std::optional<std::string> latest(bool resume) const {
    return resume ? store_.latest() : std::nullopt;
  }

  // Restores the run's parts from `path` (by name: a checkpoint holds the whole model whatever
  // layout wrote it, and this rank takes what it trains). Returns what was read, the position
  // and the autotuner's result among it. Throws ConfigError for another optimizer, DataError
  // for another data sequence or loader position.
  CheckpointData resume_from(const std::string& path);

  // Commits the run at `position`, unless that step was saved (checkpoint.enabled off: nothing).
  // `autotune_json` goes with it; `progress` tells the stall watchdog the rank is alive.
  // Returns true when this rank committed a checkpoint.
  bool save(const TrainPosition& position, const std::string& autotune_json,
            const std::function<void()>& progress);

  const std::string& last() const { return last_; }  // committed or resumed from; "" if none
  int64_t committed_step() const { return committed_step_; }  // of last(), on the writer
  int64_t failures() const { return failures_; }  // saves that failed under on_error: warn

  // The summary's part at `position`: the last checkpoint, whether a preempted run (`preempted`)
  // committed its stop step, and the failed saves.
  void fill_summary(const TrainPosition& position, bool preempted, TrainSummary& s) const;

  // The training loader's place at `position`: its next batch.
  data::LoaderState loader_state(const TrainPosition& position) const;

 private:
  const Config& config_;
  const bool leader_;
  Parts parts_;
  CheckpointStore store_;
  int64_t saved_step_ = -1, committed_step_ = -1, failures_ = 0;
  std::string last_;
};

}  // namespace loom::train
