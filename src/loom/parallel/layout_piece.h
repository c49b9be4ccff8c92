// A parallel dimension as applied to what a rank holds, as far as checkpoints and norms see it: the
// tensor group's slices (tensor_ranks.h), a pipeline's stages (pipeline/pipeline_stages.h), the
// data replicas and ZeRO's shards (data_replicas.h). A layout lists its pieces in the order their
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
#include "loom/models/tensor_parallel.h"
#include "loom/parallel/layout_report.h"

namespace loom::models {
class Loss;  // models/loss.h
}  // namespace loom::models

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

// Where a parameter a rank holds lives along one dimension of the mesh, as DTensor's placements
// say it. Every piece places every parameter it holds, so that what depends only on where a
// tensor lives is written once (the gradient norm over the job, ParallelLayout::clip_gradients).
struct Placement {
  enum class Kind {
    kReplicate,  // the same on every rank of the dimension's group
    kShard,      // cut by `split` between the group's ranks: each holds its slice
    kZeroShard,  // whole or gathered when used, its gradient and optimizer state spread over the
                 // replicas' ZeRO buckets: each rank holds its pieces of them
    kStage,      // held by this rank's pipeline stage alone
    kTiedCopy,   // a copy, on this rank's stage, of a parameter another stage owns
  };
  Kind kind = Kind::kReplicate;
  models::TensorSplit split;  // kShard's

  // Whether the rank at `coordinate` along the dimension counts the tensor's elements in a sum
  // over the job (each element once): a replicated tensor on the first rank only, a tied copy on
  // none (its owner's stage counts it), a slice, a ZeRO shard or a stage's own on every rank.
  bool counted_at(int coordinate) const {
    if (kind == Kind::kReplicate) return coordinate == 0;
    return kind != Kind::kTiedCopy;
  }
};

class LayoutPiece {
 public:
  virtual ~LayoutPiece() = default;

  // This dimension's placement of the parameter `name` this rank holds, and this rank's
  // coordinate along the dimension (its rank in the dimension's group).
  virtual Placement placement(const std::string& name) const = 0;
  virtual int coordinate() const = 0;

  // Its part of the run's report (layout_report.h): what it did to the model; nothing by default.
  virtual void describe(LayoutReport& /*report*/) const {}

  // What the dimension does to a step's loss and an evaluation's outputs; nothing by default.
  // The loss that trains the model for `loss` (the whole output's): another where this dimension
  // splits the output (a vocabulary-parallel cross-entropy).
  virtual const models::Loss& training_loss(const models::Loss& loss) const { return loss; }
  // An evaluation's output (no gradients) made whole along this dimension where it splits the
  // output; collective over the dimension's group then.
  virtual at::Tensor whole_output(at::Tensor output) { return output; }
  // An evaluation's sums, tallied where outputs were seen, combined over the dimension's group
  // (the same on each of its ranks after).
  virtual at::Tensor combine_eval_sums(at::Tensor sums) { return sums; }

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
