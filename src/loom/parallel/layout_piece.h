// A parallel dimension as applied to what a rank holds, as far as checkpoints see it: the tensor
// group's slices (tensor_ranks.h), a pipeline's stages (pipeline/pipeline_stages.h), the data
// replicas and ZeRO's shards (data_replicas.h). A layout lists its pieces in the order their
// dimensions were applied to the model (pipeline, then tensor, then data, as torchtitan splits
// the stages and then applies apply_tp and apply_fsdp to each); ParallelLayout cuts a
// checkpoint's whole tensors in that order and undoes the pieces for writing the other way
// (each stage's ZeRO shards, then its slices, then the stages), written once for every layout.
#pragma once

#include <ATen/Tensor.h>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "loom/core/tensor_to_fetch.h"

namespace loom::parallel {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

// The checkpoint tensors of one rank, or of the whole job once gathered.
struct CheckpointTensors {
  NamedTensors model, optimizer;  // under the model's own names
  at::Tensor rng;                 // this rank's CPU generator state
  // A pipeline's ranks draw from generators of their own: each pipeline rank's, by that rank.
  std::map<int, at::Tensor> rank_rngs;
  // Gathered for writing (gather_for_writing): the other ranks' shares, after `model` and
  // `optimizer`, each fetched from its rank when the writer reaches it, in order. finish() then
  // takes in whatever was not fetched (all of it after a failed write), so that the other ranks'
  // sends complete; it must be called once the writing is over, whatever its outcome.
  std::vector<TensorToFetch> model_to_fetch, optimizer_to_fetch;
  std::function<void()> finish;
};

// Fetches every tensor `all` has to fetch into its held ones, then finishes the fetching: what
// a gather that hands back every tensor at once makes of one made for a writer.
void fetch_all(CheckpointTensors& all);

class LayoutPiece {
 public:
  virtual ~LayoutPiece() = default;

  // Whether this rank gives a share of a checkpoint along this dimension: not a replica that
  // holds what the first replica holds.
  virtual bool takes_part_in_checkpoints() const { return true; }
  // `mine` (what this rank holds, with the dimensions applied after this one undone already)
  // made whole along this dimension on the rank of its group that goes on (the first), which
  // gets the others' shares, those it would hold all at once as tensors to fetch; nullopt on
  // the others, once theirs are given. Collective over the dimension's group.
  virtual std::optional<CheckpointTensors> gather(CheckpointTensors mine) = 0;
  // Of a checkpoint's tensors, whole along this dimension and under their names, what this rank
  // holds along it, as it holds them: of the model's, and of the optimizer state's
  // ("<param>.<field>"; the model's cut by default).
  virtual NamedTensors own_model_state(NamedTensors whole) const { return whole; }
  virtual NamedTensors own_optimizer_state(NamedTensors whole) const {
    return own_model_state(std::move(whole));
  }
};

}  // namespace loom::parallel
