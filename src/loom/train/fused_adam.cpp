#include "loom/train/fused_adam.h"

#include <ATen/Parallel.h>

#include <cmath>

#include "loom/core/cpu_capability.h"

namespace loom::train {
namespace {

// The step's coefficients, as LibTorch derives them (in double, then used on float tensors).
struct Coefficients {
  float decay;  // AdamW: p *= decay (1 - lr * weight_decay)
  float l2;     // Adam: g += l2 * p (weight_decay)
  float beta1, one_minus_beta1, beta2, one_minus_beta2;
  float sqrt_bias_correction2, eps, minus_step_size;
};

// p, g, m and v are `n` floats each. Compiled with -fno-math-errno (CMakeLists.txt), so that the
// square root (of v >= 0) vectorizes.
LOOM_ALWAYS_INLINE void update_body(float* __restrict p, const float* __restrict g,
                                    float* __restrict m, float* __restrict v, std::int64_t n,
                                    Coefficients c) {
  for (std::int64_t i = 0; i < n; ++i) {
    float param = p[i] * c.decay;
    const float grad = g[i] + c.l2 * param;
    const float mean = m[i] * c.beta1 + c.one_minus_beta1 * grad;
    const float square = v[i] * c.beta2 + c.one_minus_beta2 * grad * grad;
    m[i] = mean;
    v[i] = square;
    const float denom = std::sqrt(square) / c.sqrt_bias_correction2 + c.eps;
    p[i] = param + c.minus_step_size * (mean / denom);
  }
}

// The build of update_body that LOOM_CPU_CAPABILITY chose (AVX-512, AVX2 or portable).
void update(float* p, const float* g, float* m, float* v, std::int64_t n, Coefficients c) {
  static const auto build = kernel_for<update_body>(cpu_capability());
  build(p, g, m, v, n, c);
}

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
      const double beta1 = std::get<0>(o.betas()), beta2 = std::get<1>(o.betas());
      const double bias_correction1 = 1 - std::pow(beta1, static_cast<double>(state.step()));
      const double bias_correction2 = 1 - std::pow(beta2, static_cast<double>(state.step()));
      const Coefficients c{static_cast<float>(decoupled ? 1 - o.lr() * o.weight_decay() : 1.0),
                           static_cast<float>(decoupled ? 0.0 : o.weight_decay()),
                           static_cast<float>(beta1),
                           static_cast<float>(1 - beta1),
                           static_cast<float>(beta2),
                           static_cast<float>(1 - beta2),
                           static_cast<float>(std::sqrt(bias_correction2)),
                           static_cast<float>(o.eps()),
                           static_cast<float>(-(o.lr() / bias_correction1))};
      float* pp = p.data_ptr<float>();
      const float* gp = p.grad().data_ptr<float>();
      float* mp = state.exp_avg().template data_ptr<float>();
      float* vp = state.exp_avg_sq().template data_ptr<float>();
      at::parallel_for(0, p.numel(), 1 << 15, [&](std::int64_t begin, std::int64_t end) {
        update(pp + begin, gp + begin, mp + begin, vp + begin, end - begin, c);
      });
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
