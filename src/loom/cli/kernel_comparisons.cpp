#include "loom/cli/kernel_comparisons.h"

#include <ATen/ATen.h>
#include <torch/optim/adamw.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <limits>

#include "loom/core/autocast_scope.h"
#include "loom/core/median.h"
#include "loom/models/causal_attention.h"
#include "loom/train/fused_adam.h"

namespace loom::cli {
namespace {

double seconds_of(const std::function<void()>& call) {
  const auto start = std::chrono::steady_clock::now();
  call();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// max |a - b| / max |b| over every pair, in float.
double relative_difference(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  const at::NoGradGuard no_grad;
  double worst = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const at::Tensor x = a[i].to(at::kFloat), y = b[i].to(at::kFloat);
    worst = std::max(worst, (x - y).abs().max().item<double>());
    scale = std::max(scale, y.abs().max().item<double>());
  }
  return scale > 0 ? worst / scale : worst;
}

// The GPT bench's attention: gpt_mini's 6 heads of 64 (bench/gpt_vs_pytorch.py).
constexpr int64_t kHeads = 6, kHeadWidth = 64, kWidth = kHeads * kHeadWidth;

// q, k and v as CausalSelfAttention cuts them from its fused product [B, T, 3C]: views
// [B, heads, T, 64].
std::array<at::Tensor, 3> heads_of(const at::Tensor& fused) {
  const int64_t b = fused.size(0), t = fused.size(1);
  const auto qkv = fused.split(kWidth, 2);
  std::array<at::Tensor, 3> out;
  for (size_t i = 0; i < 3; ++i) out[i] = qkv[i].view({b, t, kHeads, kHeadWidth}).transpose(1, 2);
  return out;
}

// The layer's path today (gpt_layers.cpp): heads batched, blocks of query rows.
at::Tensor loom_attention(const at::Tensor& fused, const at::Tensor& bias) {
  const auto [q, k, v] = heads_of(fused);
  const int64_t b = fused.size(0), t = fused.size(1), n = b * kHeads;
  const auto none = [](const at::Tensor& w) { return w; };
  return models::causal_attention(q.reshape({n, t, kHeadWidth}), k.reshape({n, t, kHeadWidth}),
                                  v.reshape({n, t, kHeadWidth}), bias, 0,
                                  models::causal_query_blocks(t), none)
      .view({b, kHeads, t, kHeadWidth})
      .transpose(1, 2)
      .contiguous()
      .view({b, t, kWidth});
}

// torch's fused kernel on the same views (it takes strided heads, no copies).
at::Tensor torch_attention(const at::Tensor& fused) {
  const auto [q, k, v] = heads_of(fused);
  const int64_t b = fused.size(0), t = fused.size(1);
  return at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true)
      .transpose(1, 2)
      .contiguous()
      .view({b, t, kWidth});
}

// Forward under the precision's autocast, as the model runs, then backward: {output, gradient}.
std::vector<at::Tensor> forward_backward(const std::function<at::Tensor(const at::Tensor&)>& f,
                                         at::Tensor& fused, const at::Tensor& grad_out, bool bf16) {
  fused.mutable_grad().reset();
  at::Tensor y;
  {
    const AutocastScope autocast(bf16 ? at::kBFloat16 : at::kFloat);
    y = f(fused);
  }
  y.backward(grad_out);
  return {y.detach(), fused.grad().clone()};
}

KernelComparison attention_case(int64_t batch, int64_t context, at::ScalarType dtype,
                                const KernelBenchOptions& options) {
  const bool bf16 = dtype == at::kBFloat16;
  at::manual_seed(0);
  at::Tensor fused = at::randn({batch, context, 3 * kWidth}).to(dtype).requires_grad_();
  const at::Tensor grad_out = at::randn({batch, context, kWidth}).to(dtype);
  // The model's mask (CausalMask): 0 on and below the diagonal, -inf above, in q's type.
  const at::Tensor bias =
      at::full({context, context}, -std::numeric_limits<float>::infinity()).triu(1).to(dtype);
  const auto loom = [&](const at::Tensor& x) { return loom_attention(x, bias); };
  const auto times =
      time_side_by_side([&] { forward_backward(loom, fused, grad_out, bf16); },
                        [&] { forward_backward(torch_attention, fused, grad_out, bf16); }, options);
  KernelComparison c;
  c.name = std::string("attention ") + (bf16 ? "bf16" : "fp32") + " T=" + std::to_string(context) +
           " B=" + std::to_string(batch);
  c.group = "attention";
  c.torch = "at::scaled_dot_product_attention(is_causal)";
  c.loom_seconds = times.first;
  c.torch_seconds = times.second;
  c.repeats = options.repeats;
  c.difference = relative_difference(forward_backward(loom, fused, grad_out, bf16),
                                     forward_backward(torch_attention, fused, grad_out, bf16));
  c.difference_unit = "relative";
  // fp32: the order of the sums only. bf16: Loom's scores and weights are rounded to bf16
  // between its kernels, torch's stay float inside one.
  c.tolerance = bf16 ? 0.05 : 1e-4;
  c.note = "output and input gradient";
  return c;
}

// gpt_mini's parameter tensors at context 256 with the jargon corpus's 4000 pieces (the output
// layer tied to the token embedding): 12.3M floats.
std::vector<std::vector<int64_t>> gpt_mini_parameter_shapes() {
  std::vector<std::vector<int64_t>> shapes = {{4000, kWidth}, {256, kWidth}};
  for (int layer = 0; layer < 6; ++layer) {
    const std::vector<std::vector<int64_t>> block = {
        {kWidth}, {kWidth}, {3 * kWidth, kWidth}, {3 * kWidth}, {kWidth, kWidth},     {kWidth},
        {kWidth}, {kWidth}, {4 * kWidth, kWidth}, {4 * kWidth}, {kWidth, 4 * kWidth}, {kWidth}};
    shapes.insert(shapes.end(), block.begin(), block.end());
  }
  shapes.push_back({kWidth});
  shapes.push_back({kWidth});
  return shapes;
}

}  // namespace

PairTimes time_side_by_side(const std::function<void()>& first, const std::function<void()>& second,
                            const KernelBenchOptions& options) {
  for (int i = 0; i < options.warmup; ++i) {
    first();
    second();
  }
  std::vector<double> a, b;
  for (int i = 0; i < options.repeats; ++i) {
    if (i % 2 == 0) {
      a.push_back(seconds_of(first));
      b.push_back(seconds_of(second));
    } else {
      b.push_back(seconds_of(second));
      a.push_back(seconds_of(first));
    }
  }
  return {median(a), median(b)};
}

std::vector<KernelComparison> compare_attention(const KernelBenchOptions& options) {
  std::vector<KernelComparison> out;
  for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    out.push_back(attention_case(8, 256, dtype, options));
    out.push_back(attention_case(2, 1024, dtype, options));
  }
  return out;
}

std::vector<KernelComparison> compare_adamw(const KernelBenchOptions& options) {
  const double lr = 1e-3, beta1 = 0.9, beta2 = 0.95, decay = 0.1, eps = 1e-8;
  at::manual_seed(0);
  std::vector<at::Tensor> loom_params, torch_params, grads, exp_avgs, exp_avg_sqs, steps;
  int64_t count = 0;
  for (const auto& shape : gpt_mini_parameter_shapes()) {
    const at::Tensor p = at::randn(shape) * 0.02;
    grads.push_back(at::randn(shape) * 1e-3);
    loom_params.push_back(p.clone().requires_grad_());
    loom_params.back().mutable_grad() = grads.back();
    torch_params.push_back(p.clone());
    exp_avgs.push_back(at::zeros_like(p));
    exp_avg_sqs.push_back(at::zeros_like(p));
    steps.push_back(at::zeros({}));  // float, as torch.optim.AdamW(fused=True) keeps it
    count += p.numel();
  }
  train::FusedAdamW loom(loom_params, torch::optim::AdamWOptions(lr)
                                          .betas(std::make_tuple(beta1, beta2))
                                          .eps(eps)
                                          .weight_decay(decay));
  const auto torch_step = [&] {
    // torch.optim.AdamW(fused=True) counts the step before the kernel reads it.
    at::_foreach_add_(steps, 1);
    at::_fused_adamw_(torch_params, grads, exp_avgs, exp_avg_sqs, {}, steps, lr, beta1, beta2,
                      decay, eps, /*amsgrad=*/false, /*maximize=*/false);
  };
  const auto times = time_side_by_side([&] { loom.step(); }, torch_step, options);
  KernelComparison c;
  c.name =
      "adamw " + std::to_string(count) + " params in " + std::to_string(grads.size()) + " tensors";
  c.group = "adamw";
  c.torch = "at::_fused_adamw_";
  c.loom_seconds = times.first;
  c.torch_seconds = times.second;
  c.repeats = options.repeats;
  // Both took warmup + repeats steps from the same start with the same gradients.
  c.difference = relative_difference(loom_params, torch_params);
  c.difference_unit = "relative";
  c.tolerance = 1e-5;
  c.note = "parameters after " + std::to_string(options.warmup + options.repeats) + " steps";
  return {c};
}

}  // namespace loom::cli
