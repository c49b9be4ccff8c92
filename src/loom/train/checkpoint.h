// Checkpoints committed atomically. A checkpoint is a directory "step-<N>" holding
//   model.safetensors  parameters and buffers, by name
//   state.safetensors  optimizer state ("optimizer/<param>.<field>") and RNG state ("rng/cpu";
//                      a pipeline's other ranks' generators as "rng/cpu/rank<r>")
//   manifest.json      format, position (step, epoch, step in epoch), the training loader's
//                      state, optimizer kind, config, the layout that wrote it (ranks, data-
//                      parallel replicas, pipeline stages and split), the autotuner's result,
//                      a script's own values ("extra"), fp16's loss scale ("loss_scale")
// Tensors are under the model's own names whatever the layout, so any layout can resume it.
// It is written into a hidden temporary directory, every file fsync'ed, renamed into place, the
// parent fsync'ed, and only then is the `latest` pointer replaced. A crash at any point leaves
// the previous checkpoint intact and loadable. Under checkpoint.keep_best the best evaluation's
// checkpoint is recorded in `best.json` (replaced the same way) and pruning spares it. Not
// thread-safe; one writer per directory (which may be a thread of its own: AsyncCheckpointWriter).
#pragma once

#include <ATen/ATen.h>

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "loom/core/tensor_to_fetch.h"
#include "loom/data/loader_state.h"
#include "loom/models/model.h"
#include "loom/train/best_checkpoint.h"
#include "loom/train/loss_scaler.h"

namespace loom::train {

// Where training stands. Positions are at optimizer-step boundaries.
struct TrainPosition {
  int64_t step = 0;           // optimizer steps completed
  int64_t epoch = 0;          // epoch in progress
  int64_t step_in_epoch = 0;  // optimizer steps completed in that epoch
  int64_t samples = 0;        // training samples consumed
};

struct CheckpointData {
  TrainPosition position;
  std::optional<data::LoaderState> loader;  // absent in checkpoints from before it was saved
  models::NamedTensors model;               // parameters and buffers
  models::NamedTensors optimizer;           // see export_optimizer_state
  // More of each, written after those and fetched one at a time as the writer reaches them
  // (other ranks' shares of a pipeline, which rank 0 need not hold all at once).
  std::vector<TensorToFetch> model_to_fetch, optimizer_to_fetch;
  std::string optimizer_kind;  // sgd | adam | adamw
  at::Tensor rng_state;        // CPU generator state (of rank 0)
  std::map<int, at::Tensor>
      rank_rng_states;  // a pipeline's ranks' own generators, by pipeline rank
  // A GPU run's generator state (rank 0's GPU's), "rng/cuda"; undefined for a CPU run and in
  // checkpoints from before it was saved.
  at::Tensor device_rng_state;
  std::string layout_json;  // how the writing run was laid out; "" if unknown
  std::string config_json;
  std::string autotune_json;  // a finished autotune result (autotune_json), "" when none
  std::string extra_json;     // a script's own values (loom.checkpoint.save), "" when none
  std::optional<LossScaleState> loss_scale;  // fp16's loss scaler; none without loss scaling
};

class CheckpointStore {
 public:
  // keep: how many committed checkpoints survive pruning. Testing aids: kill_in_save_step
  // (LOOM_FAULT_KILL_IN_SAVE) SIGKILLs the process halfway through that step's save, after a
  // pause of pause_in_save_ms (LOOM_FAULT_SLOW_SAVE_MS) there in every save.
  CheckpointStore(std::string dir, int64_t keep, int64_t kill_in_save_step = 0,
                  int64_t pause_in_save_ms = 0);

  const std::string& dir() const { return dir_; }

  // Commits a checkpoint and prunes old ones; returns its path. A save that fails (disk full,
  // read-only file system) removes what it wrote and throws Error naming the directory, the
  // cause, the bytes needed and free, and the previous checkpoint, which stays intact.
  std::string save(const CheckpointData& data);

  // Removes what saves interrupted by a crash left behind (hidden directories). Only the
  // directory's one writer may call it, before its first save.
  void remove_unfinished();

  // The checkpoint to resume from: the one `latest` names, else the newest complete one.
  std::optional<std::string> latest() const;

  // Committed checkpoints, oldest first.
  std::vector<std::string> list() const;

  // checkpoint.keep_best. Records `best` in best.json (atomically, as `latest`), spares its
  // checkpoint from pruning from now on, and prunes the one it spared before if that is past
  // checkpoint.keep. Between saves only (it prunes): never while a background save is writing.
  void set_best(const BestCheckpoint& best);
  // Spares the checkpoint at `path` from pruning without recording it (a resumed run's best).
  void spare(const std::string& path);
  // What best.json records, when it names a complete checkpoint here; none when there is no
  // record, and (with a warning) when it is unreadable or its checkpoint is gone.
  std::optional<BestCheckpoint> recorded_best() const;

  // Throws DataError naming the file for a missing or malformed checkpoint.
  static CheckpointData load(const std::string& path);

 private:
  std::string commit(const CheckpointData& data, const std::string& name,
                     const std::filesystem::path& tmp_dir);
  void prune();

  std::string dir_;
  int64_t keep_;
  std::string spared_;  // the best checkpoint's directory name, kept beside the last keep_
  int64_t kill_in_save_step_;
  int64_t pause_in_save_ms_;
};

// Copies a loaded checkpoint's parameters and buffers into the model's tensors, by name. Throws
// DataError naming the checkpoint `path` and the tensor for a missing one or a shape mismatch.
void restore_model(const CheckpointData& checkpoint, const std::string& path,
                   const models::NamedTensors& parameters, const models::NamedTensors& buffers);

}  // namespace loom::train
