// Checks, on a lent GPU machine, what the move to torch 2.11 changed in Loom's use of torch's
// API, and whether CUDA can join a process that links only torch's CPU libraries (as libloom
// does) by loading libtorch_cuda.so when a CUDA device is asked for (Loom's own loading,
// core/device.cpp), whether Loom's optimizers step parameters on the GPU as on the CPU, and
// whether the parts of Loom's models that make tensors of their own compute there as on the
// CPU. Prints one JSON object per check ({"check": NAME, "ok": BOOL, ...}); exits 1 when any
// check fails. Built and run by scripts/device-check.sh; also runs on a machine without a GPU
// (the CUDA checks then report "skipped" with the reason).
#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <dlfcn.h>
#include <torch/cuda.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "loom/core/autocast_scope.h"
#include "loom/core/caching_allocator.h"
#include "loom/core/device.h"
#include "loom/core/torch_build.h"
#include "loom/models/causal_attention.h"
#include "loom/models/draw_key.h"
#include "loom/models/rotary.h"
#include "loom/models/token_cross_entropy_loss.h"
#include "loom/train/fused_adam.h"
#include "loom/train/fused_sgd.h"

namespace {

int failures = 0;

void report(const std::string& check, bool ok, const std::string& fields = "") {
  std::printf("{\"check\": \"%s\", \"ok\": %s%s%s}\n", check.c_str(), ok ? "true" : "false",
              fields.empty() ? "" : ", ", fields.c_str());
  std::fflush(stdout);
  if (!ok) ++failures;
}

std::string number(const char* name, double value) {
  char text[96];
  std::snprintf(text, sizeof text, "\"%s\": %.6g", name, value);
  return text;
}

std::string text(const char* name, std::string value) {
  std::replace(value.begin(), value.end(), '"', '\'');
  std::replace(value.begin(), value.end(), '\n', ' ');
  return std::string("\"") + name + "\": \"" + value + "\"";
}

// Median of `runs` timings of `work` in milliseconds, the device drained around each.
double median_ms(int runs, const std::function<void()>& work) {
  std::vector<double> times;
  work();  // warm-up: kernels chosen, workspaces allocated
  torch::cuda::synchronize();
  for (int i = 0; i < runs; ++i) {
    const auto start = std::chrono::steady_clock::now();
    work();
    torch::cuda::synchronize();
    times.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

void check_cpu_parts() {
  const loom::TorchBuild& build = loom::torch_build();
  report("torch_build", !build.version.empty(),
         text("version", build.version) + ", " + text("cuda", build.cuda));

  loom::CachingCpuAllocator allocator(8 << 20);
  {
    c10::DataPtr block = allocator.allocate(1 << 20);
    const bool counted = allocator.stats().bytes_in_use >= (1u << 20);
    std::vector<char> source(64, 7), copy(64, 0);
    allocator.copy_data(copy.data(), source.data(), source.size());
    report("caching_allocator", counted && copy == source,
           number("bytes_in_use", static_cast<double>(allocator.stats().bytes_in_use)));
  }

  const at::Tensor a = at::randn({64, 64});
  bool bf16_inside = false;
  {
    loom::AutocastScope scope(at::kBFloat16);
    bf16_inside = at::matmul(a, a).scalar_type() == at::kBFloat16 &&
                  at::autocast::is_autocast_enabled(at::kCPU);
  }
  const bool restored =
      !at::autocast::is_autocast_enabled(at::kCPU) && at::matmul(a, a).scalar_type() == at::kFloat;
  report("cpu_autocast_scope", bf16_inside && restored);
}

// libloom links libtorch_cpu only; CUDA comes from libtorch_cuda.so, whose static initialisers
// register torch's CUDA hooks and kernels once it is loaded. It must be loaded before anything
// asks torch about CUDA: the first question (at::hasCUDA()) fixes the hooks for the process.
// Loom's cuda_availability() loads it where a driver is: what loom itself does.
bool load_cuda() {
  const std::string library = std::string(LOOM_TORCH_LIBRARY_DIR) + "/libtorch_cuda.so";
  report("cuda_absent_before_load", ::dlopen(library.c_str(), RTLD_NOW | RTLD_NOLOAD) == nullptr);
  const auto start = std::chrono::steady_clock::now();
  const loom::CudaAvailability& cuda = loom::cuda_availability();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const bool loaded = ::dlopen(library.c_str(), RTLD_NOW | RTLD_NOLOAD) != nullptr;
  report("cuda_load", loaded || cuda.devices == 0,
         number("seconds", seconds) + ", " + number("loaded", loaded) + ", " +
             number("devices", cuda.devices) + ", " + text("why_not", cuda.why_not));
  return cuda.devices > 0;
}

// Three steps of one of Loom's optimizers (torch's fused kernels on the GPU; on the CPU Loom's
// loop for SGD, torch's kernel for AdamW) from the same start on each device; the largest
// difference of the parameters.
template <typename Optimizer, typename Options>
double optimizer_gpu_against_cpu(const Options& options) {
  auto run = [&](const at::Device& device) {
    at::manual_seed(2);
    std::vector<at::Tensor> params = {at::randn({1 << 16}).to(device).requires_grad_(true),
                                      at::randn({64, 33}).to(device).requires_grad_(true)};
    Optimizer optimizer(params, options);
    for (int step = 0; step < 3; ++step) {
      for (auto& p : params) p.mutable_grad() = at::randn(p.sizes()).to(device);
      optimizer.step();
    }
    std::vector<at::Tensor> out;
    for (auto& p : params) out.push_back(p.detach().cpu());
    return out;
  };
  const auto gpu = run(at::Device(at::kCUDA)), cpu = run(at::Device(at::kCPU));
  double worst = 0;
  for (std::size_t i = 0; i < gpu.size(); ++i) {
    worst = std::max(worst, (gpu[i] - cpu[i]).abs().max().item().toDouble());
  }
  return worst;
}

void check_cuda_parts() {
  const auto cuda = at::TensorOptions().device(at::kCUDA);
  // The same fp32 product on both devices (TF32 off by default for matmul in torch).
  const at::Tensor a = at::randn({512, 512});
  const at::Tensor b = at::randn({512, 512});
  const double product_error =
      (at::matmul(a.to(at::kCUDA), b.to(at::kCUDA)).cpu() - at::matmul(a, b))
          .abs()
          .max()
          .item<double>();
  report("cuda_matmul_equals_cpu", product_error < 1e-3, number("max_abs_error", product_error));

  const int n = 8192;
  const at::Tensor x = at::randn({n, n}, cuda.dtype(at::kBFloat16));
  const double gemm_ms = median_ms(10, [&] { (void)at::matmul(x, x); });
  report("cuda_bf16_gemm", true,
         number("ms", gemm_ms) + ", " + number("tflops", 2.0 * n * n * n / gemm_ms / 1e9));

  // CUDA autocast through the device-generic calls the port moved to.
  at::autocast::set_autocast_enabled(at::kCUDA, true);
  at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
  at::autocast::increment_nesting();
  const at::Tensor f = at::randn({64, 64}, cuda);
  const bool autocast_bf16 = at::matmul(f, f).scalar_type() == at::kBFloat16;
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  at::autocast::set_autocast_enabled(at::kCUDA, false);
  report("cuda_autocast", autocast_bf16 && at::autocast::is_autocast_available(at::kCUDA));

  // GPT-2 124M's attention shape: causal SDPA in bf16 against the unfused reference.
  const at::Tensor q = at::randn({16, 12, 1024, 64}, cuda.dtype(at::kBFloat16));
  const at::Tensor k = at::randn_like(q), v = at::randn_like(q);
  const at::Tensor fused = at::scaled_dot_product_attention(q, k, v, {}, 0.0, true);
  const at::Tensor mask = at::ones({1024, 1024}, cuda.dtype(at::kBool)).tril();
  const at::Tensor scores = at::matmul(q.to(at::kFloat), k.to(at::kFloat).transpose(-2, -1)) / 8.0;
  const at::Tensor reference = at::matmul(
      at::softmax(scores.masked_fill(mask.logical_not(), -INFINITY), -1), v.to(at::kFloat));
  const double attention_error = (fused.to(at::kFloat) - reference).abs().max().item<double>();
  const double attention_ms =
      median_ms(10, [&] { (void)at::scaled_dot_product_attention(q, k, v, {}, 0.0, true); });
  report("cuda_sdpa_causal_bf16", attention_error < 0.05,
         number("max_abs_error", attention_error) + ", " + number("ms", attention_ms));

  // One fused AdamW step on each device from the same state: equal.
  const int64_t size = 1 << 20;
  auto adamw_step = [&](const at::Device& device) {
    at::manual_seed(1);
    at::Tensor p = at::randn({size}).to(device), g = at::randn({size}).to(device);
    at::Tensor m = at::zeros_like(p), v2 = at::zeros_like(p);
    at::Tensor step = at::ones({}, at::TensorOptions().device(device));  // incremented first
    at::_fused_adamw_({p}, {g}, {m}, {v2}, {}, {step}, 1e-3, 0.9, 0.95, 0.1, 1e-8, false, false);
    return p.cpu();
  };
  const double adamw_error = (adamw_step(at::Device(at::kCUDA)) - adamw_step(at::Device(at::kCPU)))
                                 .abs()
                                 .max()
                                 .item<double>();
  report("cuda_fused_adamw_equals_cpu", adamw_error < 1e-6, number("max_abs_error", adamw_error));

  const double sgd_error = optimizer_gpu_against_cpu<loom::train::FusedSGD>(
      torch::optim::SGDOptions(0.05).momentum(0.9).nesterov(true).weight_decay(1e-3));
  report("loom_fused_sgd_gpu_equals_cpu", sgd_error < 1e-5, number("max_abs_error", sgd_error));
  // Its steps counted on the host and copied to the parameters' device, once a group.
  const double adamw_loom_error = optimizer_gpu_against_cpu<loom::train::FusedAdamW>(
      torch::optim::AdamWOptions(1e-3).betas({0.9, 0.95}).weight_decay(0.1));
  report("loom_fused_adamw_gpu_equals_cpu", adamw_loom_error < 1e-5,
         number("max_abs_error", adamw_loom_error));
}

double largest_difference(const at::Tensor& on_gpu, const at::Tensor& on_cpu) {
  return (on_gpu.cpu().to(at::kDouble) - on_cpu.to(at::kDouble)).abs().max().item<double>();
}

// The pieces of Loom's models that make tensors of their own in a pass, on the GPU against the
// CPU: keyed dropout masks (drawn there by tensor operations), rotary tables, the blocked causal
// attention, and the token loss (torch's kernel on the GPU, Loom's fused one on the CPU).
void check_model_parts_on_cuda() {
  const at::Device gpu(at::kCUDA), cpu(at::kCPU);
  loom::models::SampleKeys keys;
  keys.key = 42;
  keys.first = 3;
  const auto mask_on = [&](const at::Device& device) {
    const loom::models::DrawKeyScope keyed(keys);
    loom::models::start_block_draws(2);
    return loom::models::dropout_mask({8, 12, 130}, 0.1,
                                      at::TensorOptions().dtype(at::kFloat).device(device));
  };
  const at::Tensor gpu_mask = mask_on(gpu);
  report("loom_keyed_dropout_mask_gpu_equals_cpu",
         gpu_mask.device().is_cuda() && at::equal(gpu_mask.cpu(), mask_on(cpu)));

  loom::models::Rotary rotary(64, 500000, loom::models::RopeScaling{});
  const at::Tensor heads = at::randn({2, 4, 300, 64});
  const double rotary_error =
      largest_difference(rotary.apply(heads.to(gpu), 7), rotary.apply(heads, 7));
  report("loom_rotary_gpu_equals_cpu", rotary_error < 1e-4, number("max_abs_error", rotary_error));

  const at::Tensor q = at::randn({6, 200, 32}), k = at::randn({6, 200, 32}),
                   v = at::randn({6, 200, 32});
  const at::Tensor bias = at::full({200, 200}, -INFINITY).triu(1);
  const auto attend = [&](const at::Device& device) {
    return loom::models::causal_attention(q.to(device), k.to(device), v.to(device), bias.to(device),
                                          0, 2, [](const at::Tensor& w) { return w; });
  };
  const double attention_error = largest_difference(attend(gpu), attend(cpu));
  report("loom_causal_attention_gpu_equals_cpu", attention_error < 1e-4,
         number("max_abs_error", attention_error));

  const at::Tensor logits = at::randn({4, 64, 1000}), targets = at::randint(1000, {4, 64});
  const auto loss_and_gradient = [&](const at::Device& device) {
    const at::Tensor x = logits.to(device).requires_grad_(true);
    const at::Tensor loss = loom::models::TokenCrossEntropyLoss()(x, targets.to(device));
    loss.backward();
    return std::pair{loss.detach(), x.grad()};
  };
  const auto [gpu_loss, gpu_grad] = loss_and_gradient(gpu);
  const auto [cpu_loss, cpu_grad] = loss_and_gradient(cpu);
  const double loss_error = largest_difference(gpu_loss, cpu_loss);
  const double gradient_error = largest_difference(gpu_grad, cpu_grad);
  report("loom_token_loss_gpu_equals_cpu", loss_error < 1e-4 && gradient_error < 1e-6,
         number("loss_error", loss_error) + ", " + number("gradient_error", gradient_error));
}

}  // namespace

int main() {
  try {
    check_cpu_parts();
    if (load_cuda()) {
      check_cuda_parts();
      check_model_parts_on_cuda();
    } else {
      report("cuda_parts", true, text("skipped", "no CUDA device"));
    }
  } catch (const std::exception& e) {
    report("exception", false, text("what", std::string(e.what()).substr(0, 300)));
  }
  return failures == 0 ? 0 : 1;
}
