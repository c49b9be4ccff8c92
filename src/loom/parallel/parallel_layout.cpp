#include "loom/parallel/parallel_layout.h"

// clip_grad.h uses torch::Tensor without including its declaration: types.h goes first.
// clang-format off
#include <torch/types.h>
// clang-format on

#include <algorithm>
#include <cmath>
#include <iterator>

#include "loom/comm/tensor_message.h"
#include "loom/parallel/data_replicas.h"
#include "loom/parallel/layout_metrics.h"
#include "loom/parallel/zero_partition.h"

namespace loom::parallel {

std::vector<Placement> ParallelLayout::placements(const std::string& name) const {
  std::vector<Placement> out;
  for (const LayoutPiece* piece : parts_.applied) out.push_back(piece->placement(name));
  return out;
}

void ParallelLayout::clip_gradients(double max_norm) {
  const auto counted_here = [&](const std::string& name) {
    for (const LayoutPiece* piece : parts_.applied) {
      if (!piece->placement(name).counted_at(piece->coordinate())) return false;
    }
    return true;
  };
  // Whether every gradient is the same on every rank that holds it (found at the first that is
  // not: for a sliced, sharded or staged model, its first parameter).
  const auto replicated = [&] {
    for (const auto& [name, p] : parameters_) {
      for (const LayoutPiece* piece : parts_.applied) {
        if (piece->placement(name).kind != Placement::Kind::kReplicate) return false;
      }
    }
    return true;
  };
  if (!parts_.trainers || replicated()) {
    // This rank's gradients are the whole model's (replicas hold the same).
    std::vector<at::Tensor> gradients;
    for (const auto& [name, p] : parameters_) {
      if (p.grad().defined()) gradients.push_back(p.grad());
    }
    clip_whole_gradients(gradients, max_norm);
    return;
  }
  std::vector<at::Tensor> counted;
  if (const ZeroPartition* zero = parts_.data ? parts_.data->partition() : nullptr) {
    // Each rank holds its shards of the mean gradients: every piece of a parameter in them is
    // counted where its parameter is.
    for (const auto& [p, piece] : zero->gradient_pieces()) {
      if (counted_here(zero->parameters()[p].first)) counted.push_back(piece);
    }
  } else {
    for (const auto& [name, p] : parameters_) {
      if (p.grad().defined() && counted_here(name)) counted.push_back(p.grad());
    }
  }
  clip_gradients_across(counted, held_gradients(), max_norm, *parts_.trainers, device_);
}

std::vector<at::Tensor> ParallelLayout::held_gradients() const {
  std::vector<at::Tensor> held;
  if (const ZeroPartition* zero = parts_.data ? parts_.data->partition() : nullptr) {
    for (std::size_t b = 0; b < zero->trained_bucket_count(); ++b) {
      held.push_back(zero->gradient_shard(b));
    }
    return held;
  }
  for (const auto& [name, p] : parameters_) {
    if (p.grad().defined()) held.push_back(p.grad());
  }
  return held;
}

void ParallelLayout::scale_gradients(double factor) {
  if (factor == 1.0) return;
  for (at::Tensor& gradient : held_gradients()) gradient.mul_(factor);
}

bool ParallelLayout::unscale_gradients(double factor) {
  // torch's kernel checks and scales a list in one pass, each list on one device in one type,
  // raising a flag on that device: the flags are read once, together.
  struct Group {
    c10::Device device;
    at::ScalarType type;
    std::vector<at::Tensor> gradients;
  };
  std::vector<Group> groups;
  for (const at::Tensor& gradient : held_gradients()) {
    auto same = [&](const Group& g) {
      return g.device == gradient.device() && g.type == gradient.scalar_type();
    };
    auto group = std::find_if(groups.begin(), groups.end(), same);
    if (group == groups.end()) {
      groups.push_back(Group{gradient.device(), gradient.scalar_type(), {}});
      group = std::prev(groups.end());
    }
    group->gradients.push_back(gradient);
  }
  std::vector<at::Tensor> flags;
  for (Group& group : groups) {
    const auto options = at::TensorOptions().dtype(at::kFloat).device(group.device);
    at::Tensor found = at::zeros({1}, options);
    at::_amp_foreach_non_finite_check_and_unscale_(group.gradients, found,
                                                   at::full({1}, factor, options));
    flags.push_back(found.to(at::kCPU));
  }
  bool overflowed = false;
  for (const at::Tensor& flag : flags) overflowed = overflowed || flag.item<float>() > 0;
  return !any_rank(overflowed);
}

std::string ParallelLayout::manifest_json() const { return plan_.manifest_json(); }

void fetch_all(CheckpointTensors& all) {
  for (auto [held, to_fetch] : {std::pair{&all.model, &all.model_to_fetch},
                                std::pair{&all.optimizer, &all.optimizer_to_fetch}}) {
    for (const TensorToFetch& t : *to_fetch) held->emplace_back(t.name, t.fetch());
    to_fetch->clear();
  }
  if (all.finish) all.finish();
  all.finish = nullptr;
}

bool ParallelLayout::takes_part_in_checkpoints() const {
  for (const LayoutPiece* piece : parts_.applied) {
    if (!piece->takes_part_in_checkpoints()) return false;
  }
  return true;
}

std::optional<CheckpointTensors> ParallelLayout::gather_for_writing(CheckpointTensors mine) {
  for (auto piece = parts_.applied.rbegin(); piece != parts_.applied.rend(); ++piece) {
    std::optional<CheckpointTensors> whole = (*piece)->gather(std::move(mine));
    if (!whole) return std::nullopt;
    mine = std::move(*whole);
  }
  return mine;
}

NamedTensors ParallelLayout::own_model_state(const NamedTensors& saved) const {
  NamedTensors held = saved;
  for (const LayoutPiece* piece : parts_.applied) held = piece->own_model_state(std::move(held));
  return held;
}

const NamedTensors& ParallelLayout::optimized_parameters() const {
  return parts_.data ? parts_.data->optimized(parameters_) : parameters_;
}

std::int64_t ParallelLayout::parameter_bytes_between_steps() const {
  if (parts_.data) return parts_.data->parameter_bytes_between_steps(parameters_);
  std::int64_t bytes = 0;
  for (const auto& [name, t] : parameters_) {
    bytes += static_cast<std::int64_t>(t.numel() * t.element_size());
  }
  return bytes;
}

NamedTensors ParallelLayout::own_optimizer_state(const NamedTensors& saved) const {
  NamedTensors held = saved;
  for (const LayoutPiece* piece : parts_.applied) {
    held = piece->own_optimizer_state(std::move(held));
  }
  return held;
}

std::optional<CheckpointTensors> ParallelLayout::gather(CheckpointTensors mine) {
  std::optional<CheckpointTensors> all = gather_for_writing(std::move(mine));
  if (all) fetch_all(*all);
  return all;
}

std::vector<LayoutMetrics*> ParallelLayout::metrics() {
  if (LayoutMetrics* exchange = grad_sync_->metrics()) return {exchange};
  return {};
}

namespace {

bool several(const comm::Communicator* group) { return group && group->world() > 1; }

double all_reduced(comm::Communicator& group, double value, comm::ReduceOp op) {
  at::Tensor t = at::tensor({value}, at::kDouble);
  group.allreduce(t, op)->wait(group.options().timeout);
  return t.item<double>();
}

}  // namespace

double ParallelLayout::mean_over_trainers(double value) {
  comm::Communicator* trainers = parts_.trainers;
  return several(trainers) ? all_reduced(*trainers, value, comm::ReduceOp::kAvg) : value;
}

bool ParallelLayout::any_rank(bool mine) {
  comm::Communicator* trainers = parts_.trainers;
  // Async and SSP workers each stop at their own next step; the checkpoint then holds rank 0's
  // position, as every such checkpoint does.
  if (!several(trainers) || !plan_.lockstep()) return mine;
  return all_reduced(*trainers, mine ? 1.0 : 0.0, comm::ReduceOp::kSum) > 0;
}

std::vector<double> ParallelLayout::by_trainer(double mine) {
  comm::Communicator* trainers = parts_.trainers;
  if (!several(trainers) || parts_.stages) return {};
  at::Tensor all = at::zeros({trainers->world()}, at::kDouble);
  trainers->allgather(at::tensor({mine}, at::kDouble), all)->wait(trainers->options().timeout);
  const double* values = all.data_ptr<double>();
  return std::vector<double>(values, values + trainers->world());
}

double ParallelLayout::sum_over_stages(double mine) {
  comm::Communicator* stages = parts_.stages;
  return several(stages) ? all_reduced(*stages, mine, comm::ReduceOp::kSum) : mine;
}

at::Tensor ParallelLayout::combine_eval_sums(at::Tensor sums) {
  for (LayoutPiece* piece : parts_.applied) sums = piece->combine_eval_sums(std::move(sums));
  return sums;
}

const models::Loss& ParallelLayout::training_loss(const models::Loss& loss) const {
  const models::Loss* trained = &loss;
  for (const LayoutPiece* piece : parts_.applied) trained = &piece->training_loss(*trained);
  return *trained;
}

at::Tensor ParallelLayout::whole_output(at::Tensor output) {
  for (LayoutPiece* piece : parts_.applied) output = piece->whole_output(std::move(output));
  return output;
}

at::Tensor ParallelLayout::own_rng(const CheckpointTensors& saved) const {
  if (!parts_.stages) return saved.rng;
  const auto own = saved.rank_rngs.find(parts_.stages->rank());
  return own != saved.rank_rngs.end() ? own->second : saved.rng;
}

std::string ParallelLayout::describe_waits() const {
  return grad_sync_->describe() + (parts_.stages ? " and the pipeline's neighbouring stages" : "");
}

LayoutReport ParallelLayout::report() {
  LayoutReport r;
  if (several(parts_.trainers)) r.backend = parts_.trainers->backend();
  r.exchange = grad_sync_->describe();
  for (const LayoutPiece* piece : parts_.applied) piece->describe(r);
  for (const LayoutMetrics* piece : metrics()) piece->fill(r);
  return r;
}

namespace {

// Whether gradients must be multiplied by `coefficient` (clamped to at most 1): on the CPU, where
// reading it costs no wait, only when it is below 1, which spares a pass over every gradient in
// steps that do not clip; on a device always (x 1 changes nothing), rather than wait for it.
bool clips(const at::Tensor& coefficient) {
  return !coefficient.is_cpu() || coefficient.item<double>() < 1.0;
}

}  // namespace

void clip_whole_gradients(const std::vector<at::Tensor>& gradients, double max_norm) {
  if (gradients.empty()) return;
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> norms;
  for (const at::Tensor& g : gradients) norms.push_back(g.norm(2.0));
  const at::Tensor norm = norms.size() == 1 ? norms.front() : at::stack(norms).norm(2.0);
  const at::Tensor coefficient = at::clamp(max_norm / (norm + 1e-6), std::nullopt, 1.0);
  if (!clips(coefficient)) return;
  for (at::Tensor g : gradients) g.mul_(coefficient);
}

void clip_gradients_across(const std::vector<at::Tensor>& counted,
                           const std::vector<at::Tensor>& scaled, double max_norm,
                           comm::Communicator& comm, c10::Device device) {
  // The norm of the per-gradient norms, as clip_grad_norm_ computes it; their squares are
  // summed in double, in order (cumsum's last: on the CPU a running sum, as a loop on the host
  // would add them), so the sum over ranks is the same whichever rank adds first.
  at::NoGradGuard no_grad;
  const auto doubles = at::TensorOptions(at::kDouble).device(device);
  at::Tensor squares = at::zeros({1}, doubles);
  if (!counted.empty()) {
    std::vector<at::Tensor> norms;
    norms.reserve(counted.size());
    for (const at::Tensor& g : counted) norms.push_back(g.norm().to(doubles));
    const at::Tensor all = at::stack(norms);
    squares = (all * all).cumsum(0).narrow(0, all.size(0) - 1, 1).contiguous();
  }
  comm.allreduce(squares, comm::ReduceOp::kSum)->wait(comm.options().timeout);
  // max_norm / (norm + 1e-6), at most 1 (a true division, as the host's was).
  const at::Tensor coefficient =
      at::full_like(squares, max_norm).div(squares.sqrt() + 1e-6).clamp_max(1.0).squeeze(0);
  if (!clips(coefficient)) return;
  for (at::Tensor g : scaled) g.mul_(coefficient.to(g.scalar_type()));
}

models::NamedTensors gather_on_rank0(comm::Communicator& comm, const models::NamedTensors& mine) {
  if (comm.rank() != 0) {
    comm::PendingSends sends;
    comm::send_named_tensors(comm, mine, 0, sends);
    sends.wait_all(comm.options().timeout);
    return {};
  }
  // The others' arrive in host memory (tensor messages travel there): rank 0's own go there too,
  // so that what is put together from them is on one device.
  models::NamedTensors all;
  for (const auto& [name, tensor] : mine) all.emplace_back(name, tensor.to(at::kCPU));
  for (int r = 1; r < comm.world(); ++r) {
    for (auto& named : comm::recv_named_tensors(comm, r)) all.push_back(std::move(named));
  }
  return all;
}

}  // namespace loom::parallel
