#include "loom/parallel/tensor_ranks.h"

#include <ATen/ATen.h>

#include <map>

#include "loom/core/error.h"

namespace loom::parallel {

// The group's sums for the model's split layers. A training step's are charged to tensor_comm,
// then to the forward or backward they interrupted; evaluation's (no gradients) are no step's.
class CommTensorGroup : public models::TensorGroup {
 public:
  explicit CommTensorGroup(comm::Communicator& comm) : comm_(comm) {}
  int rank() const override { return comm_.rank(); }
  int size() const override { return comm_.world(); }
  void sum(at::Tensor& tensor) override {
    comm_.allreduce(tensor, comm::ReduceOp::kSum)->wait(comm_.options().timeout);
  }
  void sum_in(at::Tensor& tensor, models::SumPass pass) override {
    const bool charged = phases_ && pass != models::SumPass::kNoStep;
    if (charged) phases_->enter(Phase::kTensorComm);
    sum(tensor);
    if (charged) {
      phases_->enter(pass == models::SumPass::kForward ? Phase::kForward : Phase::kBackward);
    }
  }
  void set_phase_sink(PhaseSink* sink) { phases_ = sink; }

 private:
  comm::Communicator& comm_;
  PhaseSink* phases_ = nullptr;
};

TensorRanks::TensorRanks(const LayoutPlan& plan, models::Model& model,
                         const MakeGroup& make_group) {
  if (!make_group) throw Error("tensor parallel: the layout was given no way to make groups");
  comm_ = make_group(plan.mesh.group(plan.rank, kTensorDim),
                     plan.mesh.group_name(plan.rank, kTensorDim));
  group_ = std::make_unique<CommTensorGroup>(*comm_);
  model.split_for_tensor_parallel(*group_);
  splits_ = model.tensor_splits();
}

TensorRanks::~TensorRanks() = default;

const models::TensorSplit* TensorRanks::split_of(const std::string& name,
                                                 const at::Tensor& tensor) const {
  auto it = splits_.find(name);
  if (it == splits_.end()) {
    // Optimizer state: "<param>.<field>", split as its parameter where it has its shape.
    const auto dot = name.rfind('.');
    if (dot == std::string::npos) return nullptr;
    it = splits_.find(name.substr(0, dot));
    if (it == splits_.end()) return nullptr;
  }
  return tensor.dim() == 0 ? nullptr : &it->second;
}

void TensorRanks::set_phase_sink(PhaseSink* sink) { group_->set_phase_sink(sink); }

void TensorRanks::clip_gradients(const NamedTensors& parameters, const ZeroPartition* zero,
                                 double max_norm, comm::Communicator& job) {
  // Whole parameters hold the same gradient on every rank of the group: counted by its first.
  const auto counted_here = [&](const std::string& name) {
    return rank() == 0 || splits_.count(name) > 0;
  };
  if (!zero) {
    // The replicas hold the same gradients: the norm is the group's.
    std::set<std::string> copies;
    for (const auto& [name, p] : parameters) {
      if (!counted_here(name)) copies.insert(name);
    }
    return clip_grad_norm_across(parameters, max_norm, *comm_, copies);
  }
  std::vector<at::Tensor> counted, scaled;
  for (const auto& [p, piece] : zero->gradient_pieces()) {
    if (counted_here(zero->parameters()[p].first)) counted.push_back(piece);
  }
  for (std::size_t b = 0; b < zero->bucket_count(); ++b) scaled.push_back(zero->gradient_shard(b));
  clip_gradients_across(counted, scaled, max_norm, job);
}

std::optional<CheckpointTensors> TensorRanks::gather(CheckpointTensors mine) {
  const NamedTensors model = gather_on_rank0(*comm_, mine.model);
  const NamedTensors optimizer = gather_on_rank0(*comm_, mine.optimizer);
  if (rank() != 0) return std::nullopt;
  // Every rank's tensors come in rank order: a split one's slices are its entries by rank.
  const auto put_together = [&](const NamedTensors& all, std::size_t per_rank) {
    NamedTensors out;
    for (std::size_t i = 0; i < per_rank; ++i) {
      const auto& [name, first] = all[i];
      const models::TensorSplit* split = split_of(name, first);
      if (!split) {
        out.emplace_back(name, first);
        continue;
      }
      std::vector<at::Tensor> slices;
      for (int r = 0; r < comm_->world(); ++r) {
        const auto& [their_name, slice] = all[r * per_rank + i];
        if (their_name != name) {
          throw CommError("checkpoint: tensor rank " + std::to_string(r) + " sent '" +
                          their_name + "' where '" + name + "' was expected");
        }
        slices.push_back(slice);
      }
      out.emplace_back(name, models::whole_of(slices, *split));
    }
    return out;
  };
  mine.model = put_together(model, mine.model.size());
  mine.optimizer = put_together(optimizer, mine.optimizer.size());
  return mine;
}

NamedTensors TensorRanks::own_slices(const NamedTensors& whole) const {
  NamedTensors out;
  for (const auto& [name, tensor] : whole) {
    const models::TensorSplit* split = split_of(name, tensor);
    out.emplace_back(name, split ? models::slice_of(tensor, *split, comm_->rank(), comm_->world())
                                 : tensor);
  }
  return out;
}

}  // namespace loom::parallel
