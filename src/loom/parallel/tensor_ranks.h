// The tensor dimension's piece of a layout: the ranks of this rank's tensor group (the mesh's
// innermost dimension) split the model's layers between them (models/tensor_parallel.h), each
// holding its slice of every split weight under the whole tensor's name. The piece owns the
// group's communicator and what the dimension adds to a run: the model split over the group,
// which gradients it counts in the whole model's norm, checkpoints under the whole tensors (the
// slices put together on the group's first rank) and a checkpoint's whole tensors cut into this
// rank's slices on resume. With parallel.tensor_sequence the group also splits the layers' regions
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

class TensorRanks : public LayoutPiece {
 public:
  // Joins this rank's tensor group (`make_group` over the mesh's "tensor" dimension) and splits
  // `model` over it. Throws ConfigError naming parallel.tensor for a model that cannot be split
  // (parallel.tensor_sequence for one that cannot split the sequence).
  TensorRanks(const LayoutPlan& plan, models::Model& model, const comm::MakeGroup& make_group);
  ~TensorRanks();

  comm::Communicator& group() { return *comm_; }
  int rank() const { return comm_->rank(); }
  // Where the split layers' sums in a training step are charged: tensor_comm, then forward or
  // backward again (null: not reported).
  void set_phase_sink(PhaseSink* sink);

  // A split parameter is cut (its TensorSplit), the others replicated over the group.
  Placement placement(const std::string& name) const override;
  int coordinate() const override { return rank(); }
  // The plan as applied and the count of parameters it cut.
  void describe(LayoutReport& report) const override;
  // The whole tensors from every rank's slices, on the group's first rank (the others send
  // theirs and get nothing). The split ones come as tensors to fetch, each put together from
  // the slices when the writer reaches it; what `mine` had to fetch (its replicas' ZeRO shards)
  // is taken in first.
  std::optional<CheckpointTensors> gather(CheckpointTensors mine) override;
  // The loss that trains the model for `loss` (the whole output's): the same loss across the
  // group where the output is split (the plan's output module was cut), `loss` itself otherwise.
  const models::Loss& training_loss(const models::Loss& loss) const override {
    return output_split_ ? *split_output_loss_ : loss;
  }
  // Where the output is split, the whole output from every rank's share of its last dimension;
  // collective over the group.
  at::Tensor whole_output(at::Tensor output) override;
  // A checkpoint's whole tensors (the model's, or optimizer state "<param>.<field>") cut into
  // this rank's slices; the rest as they are.
  NamedTensors own_model_state(NamedTensors whole) const override;

 private:
  // The split of a model tensor or of its optimizer state "<param>.<field>"; null when whole.
  const models::TensorSplit* split_of(const std::string& name, const at::Tensor& tensor) const;

  std::unique_ptr<comm::Communicator> comm_;
  std::unique_ptr<CommTensorGroup> group_;  // comm_ as the model sees it
  models::TensorPlan plan_;                 // the model's, as applied
  models::TensorSplits splits_;
  bool output_split_ = false;
  std::unique_ptr<models::Loss> split_output_loss_;
};

}  // namespace loom::parallel
