#include "loom/train/fused_adam.h"

#include <ATen/ATen.h>

#include <vector>

namespace loom::train {
namespace {

bool fusable(const at::Tensor& p) {
  const at::Tensor& g = p.grad();
  return p.scalar_type() == at::kFloat && p.is_non_overlapping_and_dense() &&
         g.scalar_type() == at::kFloat && g.strides() == p.strides() && !g.is_sparse();
}

// Options: AdamOptions or AdamWOptions; State: their parameter state. `decoupled`: AdamW.
template <typename Options, typename State>
bool fused_step(
    std::vector<torch::optim::OptimizerParamGroup>& groups,
    ska::flat_hash_map<void*, std::unique_ptr<torch::optim::OptimizerParamState>>& states,
    bool decoupled) {
  for (auto& group : groups) {
    const auto& o = static_cast<const Options&>(group.options());
    if (o.amsgrad()) return false;
    for (auto& p : group.params()) {
      if (p.grad().defined() && !fusable(p)) return false;
    }
  }
  at::NoGradGuard no_grad;
  for (auto& group : groups) {
    const auto& o = static_cast<const Options&>(group.options());
    std::vector<at::Tensor> params, grads, exp_avgs, exp_avg_sqs, steps;
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      void* key = p.unsafeGetTensorImpl();
      auto found = states.find(key);
      if (found == states.end()) {
        auto state = std::make_unique<State>();
        state->step(0);
        state->exp_avg(at::zeros_like(p, at::MemoryFormat::Preserve));
        state->exp_avg_sq(at::zeros_like(p, at::MemoryFormat::Preserve));
        found = states.emplace(key, std::move(state)).first;
      }
      auto& state = static_cast<State&>(*found->second);
      state.step(state.step() + 1);
      params.push_back(p);
      grads.push_back(p.grad());
      exp_avgs.push_back(state.exp_avg());
      exp_avg_sqs.push_back(state.exp_avg_sq());
      // torch's kernel reads the step, already counted, from a float tensor.
      steps.push_back(at::scalar_tensor(static_cast<double>(state.step())));
    }
    if (params.empty()) continue;
    if (!params.front().is_cpu()) {
      // Where the parameters are (torch's CUDA kernel reads them there): one copy for the group.
      steps = at::stack(steps).to(params.front().device()).unbind(0);
    }
    const auto [beta1, beta2] = o.betas();
    if (decoupled) {
      at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, {}, steps, o.lr(), beta1, beta2,
                        o.weight_decay(), o.eps(), /*amsgrad=*/false, /*maximize=*/false);
    } else {
      at::_fused_adam_(params, grads, exp_avgs, exp_avg_sqs, {}, steps, o.lr(), beta1, beta2,
                       o.weight_decay(), o.eps(), /*amsgrad=*/false, /*maximize=*/false);
    }
  }
  return true;
}

torch::Tensor run_closure(const torch::optim::Optimizer::LossClosure& closure) {
  if (!closure) return {};
  at::AutoGradMode enable(true);
  return closure();
}

}  // namespace

torch::Tensor FusedAdam::step(LossClosure closure) {
  torch::Tensor loss = run_closure(closure);
  if (!fused_step<torch::optim::AdamOptions, torch::optim::AdamParamState>(param_groups_, state_,
                                                                           false)) {
    torch::optim::Adam::step(nullptr);
  }
  return loss;
}

torch::Tensor FusedAdamW::step(LossClosure closure) {
  torch::Tensor loss = run_closure(closure);
  if (!fused_step<torch::optim::AdamWOptions, torch::optim::AdamWParamState>(param_groups_, state_,
                                                                             true)) {
    torch::optim::AdamW::step(nullptr);
  }
  return loss;
}

}  // namespace loom::train
