// The tensor dimension's piece of a layout: the ranks of this rank's tensor group (the mesh's
// innermost dimension) split the model's layers between them (models/tensor_parallel.h), each
// holding its slice of every split weight under the whole tensor's name. The piece owns the
// group's communicator and what the dimension adds to a run: the model split over the group,
// the gradient norm over the whole model, checkpoints under the whole tensors (the slices put
// together on the group's first rank) and a checkpoint's whole tensors cut into this rank's
// slices on resume. With parallel.tensor_sequence the group also splits the layers' regions
// between their split products by the sequence (all-gathers and reduce-scatters in place of the
// all-reduces).
//
// Threading: the training loop's. Collective methods are called by every rank of the group in
// the same order.
#pragma once

#include <memory>
#include <set>
#include <string>

#include "loom/comm/communicator.h"
#include "loom/core/step_phase.h"
#include "loom/models/loss.h"
#include "loom/models/model.h"
#include "loom/parallel/parallel_layout.h"
#include "loom/parallel/zero_partition.h"

namespace loom::parallel {

class CommTensorGroup;  // tensor_ranks.cpp

class TensorRanks {
 public:
  // Joins this rank's tensor group (`make_group` over the mesh's "tensor" dimension) and splits
  // `model` over it. Throws ConfigError naming parallel.tensor for a model that cannot be split
  // (parallel.tensor_sequence for one that cannot split the sequence).
  TensorRanks(const LayoutPlan& plan, models::Model& model, const MakeGroup& make_group);
  ~TensorRanks();

  comm::Communicator& group() { return *comm_; }
  int rank() const { return comm_->rank(); }
  // Where the split layers' sums in a training step are charged: tensor_comm, then forward or
  // backward again (null: not reported).
  void set_phase_sink(PhaseSink* sink);

  // Scales every rank's gradients so that the norm over the whole model is at most `max_norm`:
  // each split parameter's slices count once each, a whole (replicated) one once in all, summed
  // over the ranks of `over` (the tensor group, or every training rank). Under ZeRO (`zero`, over
  // the replicas) the gradients are the shards'. `not_counted`: parameters whose gradient another
  // rank of `over` counts (a pipeline's tied copies, another replica's), scaled here too.
  void clip_gradients(const NamedTensors& parameters, const ZeroPartition* zero, double max_norm,
                      comm::Communicator& over, const std::set<std::string>& not_counted = {});
  // The whole tensors from every rank's slices, on the group's first rank (the others send
  // theirs and get nothing): `mine` as ParallelLayout::gather_for_writing takes it (with
  // nothing to fetch yet). The split ones come as tensors to fetch, each put together from the
  // slices when the writer reaches it.
  std::optional<CheckpointTensors> gather(CheckpointTensors mine);
  // Whether the model's output is split over the group (models::Model::output_split), and the
  // loss that then trains it, across the group.
  bool output_split() const { return output_split_; }
  const models::Loss& split_output_loss() const { return *split_output_loss_; }
  // The whole output from every rank's share of its last dimension; collective over the group.
  at::Tensor whole_output(const at::Tensor& share);
  // A checkpoint's whole tensors (the model's, or optimizer state "<param>.<field>") cut into
  // this rank's slices; the rest as they are.
  NamedTensors own_slices(const NamedTensors& whole) const;

 private:
  // The split of a model tensor or of its optimizer state "<param>.<field>"; null when whole.
  const models::TensorSplit* split_of(const std::string& name, const at::Tensor& tensor) const;

  std::unique_ptr<comm::Communicator> comm_;
  std::unique_ptr<CommTensorGroup> group_;  // comm_ as the model sees it
  models::TensorSplits splits_;
  bool output_split_ = false;
  std::unique_ptr<models::Loss> split_output_loss_;
};

}  // namespace loom::parallel
