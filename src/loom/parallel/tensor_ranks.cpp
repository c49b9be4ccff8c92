#include "loom/parallel/tensor_ranks.h"

#include <ATen/ATen.h>

#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "loom/comm/tensor_message.h"
#include "loom/core/error.h"
#include "loom/models/vocab_parallel_loss.h"

namespace loom::parallel {

// The group's sums, gathers and reduce-scatters for the model's split layers. A training step's
// are charged to tensor_comm, then to the forward or backward they interrupted; evaluation's (no
// gradients) are no step's.
class CommTensorGroup : public models::TensorGroup {
 public:
  CommTensorGroup(comm::Communicator& comm, bool sequence) : comm_(comm), sequence_(sequence) {}
  int rank() const override { return comm_.rank(); }
  int size() const override { return comm_.world(); }
  void sum(at::Tensor& tensor) override {
    comm_.allreduce(tensor, comm::ReduceOp::kSum)->wait(comm_.options().timeout);
  }
  void sum_in(at::Tensor& tensor, models::SumPass pass) override {
    charged(pass, [&] { sum(tensor); });
  }
  bool splits_sequence() const override { return sequence_; }

  // The communicator's collectives take and give whole blocks, one a rank: the parts along
  // `dim` move to the front and back.
  at::Tensor gather_in(const at::Tensor& part, int64_t dim, models::SumPass pass) override {
    const at::Tensor mine = part.contiguous();
    std::vector<int64_t> sizes = mine.sizes().vec();
    sizes.insert(sizes.begin(), comm_.world());
    at::Tensor all = at::empty(sizes, mine.options());
    charged(pass, [&] { comm_.allgather(mine, all)->wait(comm_.options().timeout); });
    // [ranks, ..., part, ...] -> [..., ranks x part, ...]
    std::vector<int64_t> whole = mine.sizes().vec();
    whole[static_cast<std::size_t>(dim)] *= comm_.world();
    return all.movedim(0, dim).reshape(whole);
  }
  at::Tensor sum_scatter_in(const at::Tensor& whole, int64_t dim, models::SumPass pass) override {
    const int64_t ranks = comm_.world(), length = whole.size(dim);
    if (length % ranks != 0) {
      throw Error("tensor parallel: reduce-scatter: a length of " + std::to_string(length) +
                  " does not split over " + std::to_string(ranks) + " ranks (rank " +
                  std::to_string(rank()) + ")");
    }
    // [..., ranks x part, ...] -> [ranks, ..., part, ...]
    std::vector<int64_t> by_rank = whole.sizes().vec();
    by_rank[static_cast<std::size_t>(dim)] = length / ranks;
    by_rank.insert(by_rank.begin() + dim, ranks);
    const at::Tensor blocks = whole.reshape(by_rank).movedim(dim, 0).contiguous();
    std::vector<int64_t> sizes = whole.sizes().vec();
    sizes[static_cast<std::size_t>(dim)] = length / ranks;
    at::Tensor mine = at::empty(sizes, whole.options());
    charged(pass, [&] {
      comm_.reduce_scatter(blocks, mine, comm::ReduceOp::kSum)->wait(comm_.options().timeout);
    });
    return mine;
  }
  void set_phase_sink(PhaseSink* sink) { phases_ = sink; }

 private:
  template <typename Collective>
  void charged(models::SumPass pass, Collective&& collective) {
    models::charged_to_tensor_comm(phases_, pass, std::forward<Collective>(collective));
  }

  comm::Communicator& comm_;
  bool sequence_;
  PhaseSink* phases_ = nullptr;
};

TensorRanks::TensorRanks(const LayoutPlan& plan, models::Model& model,
                         const comm::MakeGroup& make_group) {
  if (!make_group) throw Error("tensor parallel: the layout was given no way to make groups");
  comm_ = make_group(plan.mesh.group(plan.rank, kTensorDim),
                     plan.mesh.group_name(plan.rank, kTensorDim));
  group_ = std::make_unique<CommTensorGroup>(*comm_, plan.tensor->sequence);
  const models::AppliedTensorPlan applied = models::apply_tensor_plan(model, *group_);
  plan_ = applied.plan;
  splits_ = applied.splits;
  output_split_ = applied.output_split;
  if (output_split_) {
    split_output_loss_ = std::make_unique<models::VocabParallelCrossEntropyLoss>(*group_);
  }
}

at::Tensor TensorRanks::whole_output(at::Tensor output) {
  if (!output_split_) return output;
  const at::Tensor mine = output.contiguous();
  at::Tensor all = at::empty({comm_->world() * mine.numel()}, mine.options());
  comm_->allgather(mine, all)->wait(comm_->options().timeout);
  // [ranks, ..., share] -> [..., ranks x share]: each rank's share in vocabulary order.
  std::vector<int64_t> sizes = {comm_->world()};
  for (int64_t s : mine.sizes()) sizes.push_back(s);
  at::Tensor by_rank = all.view(sizes).movedim(0, -2);
  std::vector<int64_t> whole = mine.sizes().vec();
  whole.back() *= comm_->world();
  return by_rank.reshape(whole);
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

Placement TensorRanks::placement(const std::string& name) const {
  const auto split = splits_.find(name);
  if (split == splits_.end()) return {Placement::Kind::kReplicate, {}};
  return {Placement::Kind::kShard, split->second};
}

void TensorRanks::describe(LayoutReport& report) const {
  for (const auto& [pattern, style] : plan_.styles) {
    report.tensor_plan.emplace_back(pattern, style.describe());
  }
  report.tensor_cut_parameters = static_cast<int64_t>(splits_.size());
}

void TensorRanks::set_phase_sink(PhaseSink* sink) { group_->set_phase_sink(sink); }

namespace {

// The group's first rank's side of a gather: every other rank's `count` slices, in the order
// they were sent.
class ArrivingSlices {
 public:
  ArrivingSlices(comm::Communicator& comm, std::size_t count) {
    for (int r = 1; r < comm.world(); ++r) peers_.emplace_back(comm, r, count);
  }
  std::vector<at::Tensor> take(std::size_t index) {
    // A writer may skip tensors (it fetches in order), never go back.
    if (!peers_.empty() && peers_.front().taken() > index) {
      throw Error("checkpoint: tensor-parallel slices fetched out of order");
    }
    std::vector<at::Tensor> slices;
    for (comm::PeerTensors& peer : peers_) slices.push_back(peer.take(index));
    return slices;
  }
  void drain() {
    for (comm::PeerTensors& peer : peers_) peer.drain();
  }

 private:
  std::vector<comm::PeerTensors> peers_;  // ranks 1, 2, ...
};

}  // namespace

std::optional<CheckpointTensors> TensorRanks::gather(CheckpointTensors mine) {
  fetch_all(mine);
  // Only the split tensors travel, the model's then the optimizer's, in the order every rank
  // holds them; the whole ones are the first rank's own.
  std::vector<std::pair<const NamedTensors*, std::size_t>> split;  // (list, index)
  for (const NamedTensors* list : {&mine.model, &mine.optimizer}) {
    for (std::size_t i = 0; i < list->size(); ++i) {
      if (split_of((*list)[i].first, (*list)[i].second)) split.emplace_back(list, i);
    }
  }
  if (rank() != 0) {
    comm::PendingSends sends;
    for (const auto& [list, i] : split) {
      comm::send_tensor(*comm_, (*list)[i].second.detach().contiguous(), 0, sends);
    }
    sends.wait_all(comm_->options().timeout);
    return std::nullopt;
  }
  // The first rank lays the whole tensors out to fetch: each is put together when the writer
  // reaches it, so the group's first rank never holds the whole model at once.
  auto arriving = std::make_shared<ArrivingSlices>(*comm_, split.size());
  CheckpointTensors out;
  out.rng = mine.rng;
  out.rank_rngs = std::move(mine.rank_rngs);
  std::size_t sent = 0;
  for (auto [list, held, to_fetch] :
       {std::tuple{&mine.model, &out.model, &out.model_to_fetch},
        std::tuple{&mine.optimizer, &out.optimizer, &out.optimizer_to_fetch}}) {
    for (auto& [name, tensor] : *list) {
      const models::TensorSplit* how = split_of(name, tensor);
      if (!how) {
        held->emplace_back(name, tensor);
        continue;
      }
      std::vector<int64_t> sizes = tensor.sizes().vec();
      sizes[static_cast<std::size_t>(how->dim)] *= comm_->world();
      to_fetch->push_back({name, tensor.scalar_type(), sizes,
                           [arriving, index = sent++, own = tensor.detach(), split = *how] {
                             std::vector<at::Tensor> slices = arriving->take(index);
                             // The others' arrived in host memory: this rank's joins them there.
                             slices.insert(slices.begin(), own.to(at::kCPU));
                             return models::whole_of(slices, split);
                           }});
    }
  }
  out.finish = [arriving] { arriving->drain(); };
  return out;
}

NamedTensors TensorRanks::own_model_state(NamedTensors whole) const {
  NamedTensors out;
  for (const auto& [name, tensor] : whole) {
    const models::TensorSplit* split = split_of(name, tensor);
    if (!split) {
      out.emplace_back(name, tensor);
      continue;
    }
    const int64_t length = tensor.size(split->dim);
    if (length % (split->sections * comm_->world()) != 0) {
      throw DataError("checkpoint: tensor '" + name + "' has " + std::to_string(length) +
                      " along dimension " + std::to_string(split->dim) + ", which does not split " +
                      "over the tensor group's " + std::to_string(comm_->world()) +
                      " ranks (rank " + std::to_string(comm_->rank()) + ")");
    }
    out.emplace_back(name, models::slice_of(tensor, *split, comm_->rank(), comm_->world()));
  }
  return out;
}

}  // namespace loom::parallel
