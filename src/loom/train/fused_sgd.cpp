#include "loom/train/fused_sgd.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "loom/core/cpu_capability.h"

namespace loom::train {
namespace {

struct Coefficients {
  float lr, momentum, dampening, weight_decay;
  bool nesterov, first;  // first: the momentum buffer starts as the gradient
};

// p, g and buf are `n` floats each; buf is ignored when momentum is 0.
LOOM_ALWAYS_INLINE void update_body(float* __restrict p, const float* __restrict g,
                                    float* __restrict buf, std::int64_t n, Coefficients c) {
  const float keep = 1.0f - c.dampening;
  for (std::int64_t i = 0; i < n; ++i) {
    float d = g[i];
    if (c.weight_decay != 0.0f) d += c.weight_decay * p[i];
    if (c.momentum != 0.0f) {
      const float b = c.first ? d : c.momentum * buf[i] + keep * d;
      buf[i] = b;
      d = c.nesterov ? d + c.momentum * b : b;
    }
    p[i] -= c.lr * d;
  }
}

// The build of update_body that LOOM_CPU_CAPABILITY chose (AVX-512, AVX2 or portable).
void update(float* p, const float* g, float* buf, std::int64_t n, Coefficients c) {
  static const auto build = kernel_for<update_body>(cpu_capability());
  build(p, g, buf, n, c);
}

bool fusable(const at::Tensor& p, const at::Tensor& g, const at::Tensor& buf) {
  auto same_layout = [&](const at::Tensor& t) {
    return t.scalar_type() == at::kFloat && t.strides() == p.strides() && !t.is_sparse();
  };
  return p.scalar_type() == at::kFloat && p.is_non_overlapping_and_dense() && same_layout(g) &&
         (!buf.defined() || same_layout(buf));
}

// The parameters (of one group) that torch's fused kernel steps, by device and by whether their
// momentum buffer is new (the kernel's is_first_step holds for a whole call).
struct TorchKernelCall {
  std::vector<at::Tensor> params, grads, buffers;
};

void run_torch_kernel(std::map<std::pair<std::string, bool>, TorchKernelCall>& calls,
                      const torch::optim::SGDOptions& o) {
  for (auto& [key, call] : calls) {
    at::_fused_sgd_(call.params, call.grads, call.buffers, o.weight_decay(), o.momentum(), o.lr(),
                    o.dampening(), o.nesterov(), /*maximize=*/false, /*is_first_step=*/key.second);
  }
  calls.clear();
}

}  // namespace

torch::Tensor FusedSGD::step(LossClosure closure) {
  at::NoGradGuard no_grad;
  torch::Tensor loss;
  if (closure) {
    at::AutoGradMode enable(true);
    loss = closure();
  }
  std::map<std::pair<std::string, bool>, TorchKernelCall> torch_calls;
  for (auto& group : param_groups_) {
    const auto& o = static_cast<const torch::optim::SGDOptions&>(group.options());
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      const at::Tensor& g = p.grad();
      void* key = p.unsafeGetTensorImpl();
      auto found = state_.find(key);
      at::Tensor buf;
      if (found != state_.end()) {
        buf = static_cast<torch::optim::SGDParamState&>(*found->second).momentum_buffer();
      }
      if (!fusable(p, g, buf)) {
        // LibTorch's arithmetic, one operation at a time.
        at::Tensor d = g;
        if (o.weight_decay() != 0) d = d.add(p, o.weight_decay());
        if (o.momentum() != 0) {
          if (!buf.defined()) {
            buf = d.clone().detach();
            auto state = std::make_unique<torch::optim::SGDParamState>();
            state->momentum_buffer(buf);
            state_[key] = std::move(state);
          } else {
            buf.mul_(o.momentum()).add_(d, 1 - o.dampening());
          }
          d = o.nesterov() ? d.add(buf, o.momentum()) : buf;
        }
        p.add_(d, -o.lr());
        continue;
      }
      const bool first = o.momentum() != 0 && !buf.defined();
      if (first) {
        buf = at::empty_like(p);
        auto state = std::make_unique<torch::optim::SGDParamState>();
        state->momentum_buffer(buf);
        state_[key] = std::move(state);
      }
      if (!p.is_cpu() || torch_kernel_on_cpu_) {
        TorchKernelCall& call = torch_calls[{p.device().str(), first}];
        call.params.push_back(p);
        call.grads.push_back(g);
        if (buf.defined()) call.buffers.push_back(buf);
        continue;
      }
      const Coefficients c{static_cast<float>(o.lr()),
                           static_cast<float>(o.momentum()),
                           static_cast<float>(o.dampening()),
                           static_cast<float>(o.weight_decay()),
                           o.nesterov(),
                           first};
      float* pp = p.data_ptr<float>();
      const float* gp = g.data_ptr<float>();
      float* bp = buf.defined() ? buf.data_ptr<float>() : nullptr;
      at::parallel_for(0, p.numel(), 1 << 15, [&](std::int64_t begin, std::int64_t end) {
        update(pp + begin, gp + begin, bp ? bp + begin : nullptr, end - begin, c);
      });
    }
    run_torch_kernel(torch_calls, o);
  }
  return loss;
}

}  // namespace loom::train
