#include "loom/parallel/parallel_layout.h"

// clip_grad.h uses torch::Tensor without including its declaration: types.h goes first.
// clang-format off
#include <torch/types.h>
#include <torch/nn/utils/clip_grad.h>
// clang-format on

#include <cmath>

#include "loom/comm/tensor_message.h"
#include "loom/parallel/layout_metrics.h"

namespace loom::parallel {

void ParallelLayout::clip_gradients(double max_norm) {
  std::vector<at::Tensor> tensors;
  for (const auto& [name, p] : parameters_) tensors.push_back(p);
  torch::nn::utils::clip_grad_norm_(tensors, max_norm);
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

std::int64_t ParallelLayout::parameter_bytes_between_steps() const {
  std::int64_t bytes = 0;
  for (const auto& [name, t] : parameters_) {
    bytes += static_cast<std::int64_t>(t.numel() * t.element_size());
  }
  return bytes;
}

std::vector<LayoutMetrics*> ParallelLayout::metrics() {
  if (LayoutMetrics* exchange = grad_sync_->metrics()) return {exchange};
  return {};
}

LayoutReport ParallelLayout::report() {
  LayoutReport r;
  r.exchange = grad_sync_->describe();
  for (const LayoutMetrics* piece : metrics()) piece->fill(r);
  return r;
}

void clip_grad_norm_across(const NamedTensors& parameters, double max_norm,
                           comm::Communicator& comm, const std::set<std::string>& copies) {
  std::vector<at::Tensor> counted, scaled;
  for (const auto& [name, p] : parameters) {
    if (!p.grad().defined()) continue;
    if (!copies.count(name)) counted.push_back(p.grad());
    scaled.push_back(p.grad());
  }
  clip_gradients_across(counted, scaled, max_norm, comm);
}

void clip_gradients_across(const std::vector<at::Tensor>& counted,
                           const std::vector<at::Tensor>& scaled, double max_norm,
                           comm::Communicator& comm) {
  // The norm of the per-gradient norms, as clip_grad_norm_ computes it; their squares are
  // summed in double, so the sum over ranks is the same whichever rank adds first.
  double squares = 0;
  for (const at::Tensor& g : counted) {
    const double norm = g.norm().item<double>();
    squares += norm * norm;
  }
  at::Tensor total = at::tensor({squares}, at::kDouble);
  comm.allreduce(total, comm::ReduceOp::kSum)->wait(comm.options().timeout);
  const double norm = std::sqrt(total.item<double>());
  const double coefficient = max_norm / (norm + 1e-6);
  if (coefficient >= 1.0) return;
  at::NoGradGuard no_grad;
  for (at::Tensor g : scaled) g.mul_(coefficient);
}

models::NamedTensors gather_on_rank0(comm::Communicator& comm, const models::NamedTensors& mine) {
  if (comm.rank() != 0) {
    comm::PendingSends sends;
    comm::send_named_tensors(comm, mine, 0, sends);
    sends.wait_all(comm.options().timeout);
    return {};
  }
  models::NamedTensors all = mine;
  for (int r = 1; r < comm.world(); ++r) {
    for (auto& named : comm::recv_named_tensors(comm, r)) all.push_back(std::move(named));
  }
  return all;
}

}  // namespace loom::parallel
