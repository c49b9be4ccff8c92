// Device, precision, memory layout and thread count chosen for the hardware, each with the
// reason, so the choice can be printed and recorded. `auto` resolves as:
//   device        CUDA device LOCAL_RANK where this process can use a GPU, else the CPU
//   precision     bf16 autocast on a GPU with bf16 tensor cores (compute capability 8.0 on), fp16
//                 autocast with dynamic loss scaling on one with fp16 tensor cores only (7.x:
//                 V100, T4), fp32 on an older one or one whose capability cannot be read; bf16
//                 on a CPU with AVX-512 BF16 or AMX where LibTorch has oneDNN
//   memory_format channels_last for convolutional models
//   threads       the cores this process may run on (affinity and cgroup quota)
#pragma once

#include <c10/core/Device.h>

#include <string>

#include "loom/core/autocast_scope.h"
#include "loom/core/config.h"
#include "loom/core/topology.h"

namespace loom::train {

// Where a rank trains (runtime.device), and why there.
struct DeviceChoice {
  c10::Device device = c10::kCPU;
  std::string reason = "set in runtime.device";
  // A GPU's compute capability, major * 10 + minor (0: the CPU, or not known); its tensor cores
  // compute bf16 from 80 on.
  int compute_capability = 0;
  bool gpu_bf16() const { return compute_capability >= 80; }
  // Tensor cores that multiply fp16 (Volta on).
  bool gpu_fp16() const { return compute_capability >= 70; }
};

// runtime.device for the rank of local rank `local_rank` (its GPU under `cuda` and `auto`).
// Throws ConfigError naming runtime.device: a value that is none of its own, a GPU asked for
// where this process can use none, or a device index past the GPUs there are.
DeviceChoice choose_device(const RuntimeConfig& config, int local_rank);

struct RuntimeChoice {
  std::string device = "cpu";  // cpu | cuda:N ("as the script left it" for a user's own loop)
  std::string precision;       // fp32 | bf16 | fp16
  std::string memory_format;   // contiguous | channels_last
  int threads = 1;
  std::string device_reason = "set in runtime.device";
  std::string precision_reason, memory_format_reason, threads_reason;
  bool native_bf16 = false;    // the device computes bf16 natively (the GPU's or the CPU's units)
  bool deterministic = false;  // runtime.deterministic: only deterministic algorithms

  // fp16's products need the loss scaled so that small gradients do not flush to zero (and a
  // step whose gradients overflowed skipped): train/loss_scaler.h.
  bool loss_scaling() const { return precision == "fp16"; }
  // The type autocast computes products in; kFloat: fp32, autocast off.
  at::ScalarType autocast_dtype() const {
    return precision == "bf16" ? at::kBFloat16 : precision == "fp16" ? at::kHalf : at::kFloat;
  }
  c10::Device torch_device() const { return c10::Device(device); }
};

// Turns torch's deterministic algorithms on for this process (runtime.deterministic): ATen's
// deterministic kernels or an error naming the operation that has none, cuDNN's deterministic
// convolutions without benchmarking, and cuBLAS's fixed workspace (CUBLAS_WORKSPACE_CONFIG, set
// unless the environment sets it, before cuBLAS starts).
void use_deterministic_algorithms();

RuntimeChoice choose_runtime(const RuntimeConfig& config, const Topology& topology,
                             bool convolutional_model, bool onednn_available,
                             const DeviceChoice& device = {});

// AutocastScope lives in core/autocast_scope.h: every layer that runs a forward pass uses it.
using loom::AutocastScope;

}  // namespace loom::train
