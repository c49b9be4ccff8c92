// Tensor parallelism's pieces that a model's layers use, as Megatron-LM splits a transformer:
// the ranks of a tensor group each hold a slice of a layer's weights, and two operators move
// what crosses between the split and the replicated parts of a layer (Shoeybi et al., 2019):
//   - enter_split(x): x is replicated on every rank and goes into a product split by columns;
//     forward is x itself, backward sums the ranks' gradients of x (each saw only its slice);
//   - leave_split(y): y is this rank's partial sum out of a product split by rows; forward sums
//     it over the ranks, backward hands the replicated gradient to each rank as it is.
// So each attention and each MLP costs one all-reduce forward and one backward.
//
// Sequence parallelism (Korthikanti et al., 2022) splits what lies between the split products
// too (the LayerNorms, the dropouts, the residual stream) by the sequence: rank r holds positions
// [r T/n, (r + 1) T/n) there, and the all-reduces become an all-gather into a split sublayer and
// a reduce-scatter out of it, the same bytes:
//   - gather_sequence(x): x is this rank's positions; forward puts every rank's together,
//     backward sums the ranks' gradients of the whole and keeps this rank's positions';
//   - scatter_sequence(y): y is this rank's partial sum over every position; forward sums it
//     over the ranks and keeps this rank's positions, backward gathers the gradient whole.
//
// How a weight is split is data (TensorSplit), so that checkpoints hold the whole tensors under
// their names: a slice is cut from the whole, and the whole put together from the slices.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "loom/core/step_phase.h"

namespace loom::models {

// Where a split layer's sum runs: in a training step's forward (leave_split, gradients on), in
// its backward (enter_split's gradient), or outside a step (a forward without gradients:
// evaluation, generation).
enum class SumPass { kForward, kBackward, kNoStep };

// Runs a tensor group's collective made in `pass`, charged to `phases` (null: nowhere): a training
// step's to tensor_comm, then back to the forward or backward it interrupted; one outside a step
// to nothing. Every tensor group, `loom train`'s and a script's, charges by this rule.
template <typename Collective>
void charged_to_tensor_comm(PhaseSink* phases, SumPass pass, Collective&& collective) {
  const bool charge = phases && pass != SumPass::kNoStep;
  if (charge) phases->enter(Phase::kTensorComm);
  collective();
  if (charge) phases->enter(pass == SumPass::kForward ? Phase::kForward : Phase::kBackward);
}

// The ranks a model's layers are split over, as the model sees them; parallel/ implements it
// over a communicator (models/ does not know communicators). The sum is in place and blocking;
// every rank of the group calls it in the same order.
class TensorGroup {
 public:
  virtual ~TensorGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual void sum(at::Tensor& tensor) = 0;
  // The split layers' sums, told which pass they belong to: a group that reports a step's
  // phases charges them to the tensor group's phase (parallel/tensor_ranks.cpp). Plain sum()
  // unless overridden.
  virtual void sum_in(at::Tensor& tensor, SumPass /*pass*/) { sum(tensor); }

  // Sequence parallelism (parallel.tensor_sequence): whether the model's layers split the
  // regions between their split products by the sequence too.
  virtual bool splits_sequence() const { return false; }
  // Every rank's `part` put together along `dim`, by rank (an all-gather).
  virtual at::Tensor gather_in(const at::Tensor& part, int64_t dim, SumPass pass);
  // The sum of every rank's `whole`, of which this rank keeps its part along `dim` (a
  // reduce-scatter). `whole`'s size along `dim` divides by size().
  virtual at::Tensor sum_scatter_in(const at::Tensor& whole, int64_t dim, SumPass pass);
  // The base's two are made of sum_in (a whole tensor's all-reduce): right for any group, and
  // what ranks as threads use; a communicator's group overrides them.
};

// While one lives on this thread, a group that splits the sequence runs its layers as plain
// tensor parallelism, their inputs and outputs whole: cached decoding's few new positions do not
// split. A mode of the thread, as torch's NoGradGuard is; guards nest.
class WholeSequenceGuard {
 public:
  WholeSequenceGuard();
  ~WholeSequenceGuard();
  WholeSequenceGuard(const WholeSequenceGuard&) = delete;
  WholeSequenceGuard& operator=(const WholeSequenceGuard&) = delete;
};

// Whether the layers split over `group` split the sequence in this forward: the group's
// parallel.tensor_sequence, outside a WholeSequenceGuard.
bool splits_sequence_now(const TensorGroup& group);

at::Tensor enter_split(const at::Tensor& x, TensorGroup& group);
at::Tensor leave_split(const at::Tensor& y, TensorGroup& group);

// Sequence parallelism's operators, along dimension 1 ([B, T, ...]); see the header comment.
// A parameter used on this rank's positions only (a LayerNorm's, a bias added after
// scatter_sequence, the position table) gets their share of its gradient: used through
// enter_split, it gets the sum over the group, the whole, before its accumulator (and a
// data-parallel exchange's hooks) see it. A parameter used twice that way gets each use's sum,
// which add up to the sum of both.
at::Tensor gather_sequence(const at::Tensor& x, TensorGroup& group);
at::Tensor scatter_sequence(const at::Tensor& y, TensorGroup& group);
// linear(gather_sequence(x), weight, bias) keeping this rank's positions `x` for backward rather
// than the whole (cast to the product's type under autocast, and gathered so), and gathering
// them again there (Megatron's sequence-parallel linear): the whole input of each product is
// not held from forward to backward, at the cost of an all-gather more in backward. `bias` may
// be undefined.
at::Tensor gathered_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                           TensorGroup& group);
// Forward as gather_sequence; backward keeps this rank's positions of the gradient without a
// sum: for an output every rank goes on with alike (a whole vocabulary's logits, whose loss
// every rank computes).
at::Tensor whole_sequence(const at::Tensor& x, TensorGroup& group);
// This rank's positions of `whole` (a copy, contiguous).
at::Tensor own_positions(const at::Tensor& whole, TensorGroup& group);
// Dropout of this rank's positions `x` ([B, T/n, ...]) with the mask one process draws for
// the whole [B, T, ...] (models/draw_key.h's dropout_mask): every rank draws the whole mask and
// keeps its positions', so the ranks' draws stay in step.
at::Tensor sequence_dropout(const at::Tensor& x, double p, bool train, TensorGroup& group);

// How a parameter is cut over the group's ranks: along `dim`, in `sections` equal sections (a
// fused query/key/value weight has 3), each cut into size() equal parts; rank r holds part r of
// every section, in order.
struct TensorSplit {
  int64_t dim = 0;
  int64_t sections = 1;
};
using TensorSplits = std::map<std::string, TensorSplit>;

// Megatron's two cuts of a linear layer's weight [out, in]: by its outputs (rows, a
// column-parallel product, whose bias is cut the same way) and by its inputs (columns, a
// row-parallel product, whose bias stays whole and is added after the sum).
inline constexpr TensorSplit kByOutputs{0, 1};
inline constexpr TensorSplit kByInputs{1, 1};

// Rank `rank`'s slice of `whole` (a copy, contiguous). Throws Error when a section's size along
// `dim` does not divide by `ranks`.
at::Tensor slice_of(const at::Tensor& whole, const TensorSplit& split, int rank, int ranks);
// The whole tensor from every rank's slice, by rank.
at::Tensor whole_of(const std::vector<at::Tensor>& slices, const TensorSplit& split);
// Replaces a parameter's values by this rank's slice of them (the same tensor, now smaller:
// optimizers and hooks made later see the slice).
void keep_slice(at::Tensor& parameter, const TensorSplit& split, TensorGroup& group);

}  // namespace loom::models
