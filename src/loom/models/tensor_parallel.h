// Tensor parallelism's pieces that a model's layers use, as Megatron-LM splits a transformer:
// the ranks of a tensor group each hold a slice of a layer's weights, and two operators move
// what crosses between the split and the replicated parts of a layer (Shoeybi et al., 2019):
//   - enter_split(x): x is replicated on every rank and goes into a product split by columns;
//     forward is x itself, backward sums the ranks' gradients of x (each saw only its slice);
//   - leave_split(y): y is this rank's partial sum out of a product split by rows; forward sums
//     it over the ranks, backward hands the replicated gradient to each rank as it is.
// So each attention and each MLP costs one all-reduce forward and one backward.
//
// How a weight is split is data (TensorSplit), so that checkpoints hold the whole tensors under
// their names: a slice is cut from the whole, and the whole put together from the slices.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace loom::models {

// Where a split layer's sum runs: in a training step's forward (leave_split, gradients on), in
// its backward (enter_split's gradient), or outside a step (a forward without gradients:
// evaluation, generation).
enum class SumPass { kForward, kBackward, kNoStep };

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
};

at::Tensor enter_split(const at::Tensor& x, TensorGroup& group);
at::Tensor leave_split(const at::Tensor& y, TensorGroup& group);

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
