#include "loom/train/runtime_choice.h"

#include <ATen/Context.h>

#include <cstdlib>

#include "loom/core/device.h"

namespace loom::train {
namespace {

std::string capability(const DeviceChoice& device) {
  return std::to_string(device.compute_capability / 10) + "." +
         std::to_string(device.compute_capability % 10);
}

}  // namespace

DeviceChoice choose_device(const RuntimeConfig& config, int local_rank) {
  DeviceChoice choice;
  choice.device = resolve_device(config.device, local_rank, "runtime.device");
  if (choice.device.is_cuda()) {
    choice.compute_capability = cuda_compute_capability(choice.device.index());
  }
  if (config.device == "auto") {
    choice.reason = choice.device.is_cuda() ? "auto: this process can use a GPU"
                                            : "auto: " + cuda_availability().why_not;
  }
  return choice;
}

void use_deterministic_algorithms() {
  // Before the first cuBLAS handle: cuBLAS reads it when it makes its workspace.
  ::setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0);
  at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/false);
  at::globalContext().setDeterministicCuDNN(true);
  at::globalContext().setBenchmarkCuDNN(false);
}

RuntimeChoice choose_runtime(const RuntimeConfig& config, const Topology& topology,
                             bool convolutional_model, bool onednn_available,
                             const DeviceChoice& device) {
  RuntimeChoice c;
  c.device = device.device.str();
  c.device_reason = device.reason;
  c.deterministic = config.deterministic;
  c.native_bf16 = device.device.is_cuda() ? device.gpu_bf16() : topology.cpu.native_bf16();
  // LOOM_CPU_CAPABILITY below avx512 stands in for a host without AVX-512, bf16 included, so
  // that a forced run makes the choices such a host would.
  const bool lowered = topology.kernels != CpuCapability::kAvx512;
  if (config.precision != "auto") {
    c.precision = config.precision;
    c.precision_reason = "set in runtime.precision";
  } else if (device.device.is_cuda() && device.gpu_bf16()) {
    // Tensor cores multiply bf16 at many times fp32's rate; autocast keeps fp32 weights.
    c.precision = "bf16";
    c.precision_reason = "GPU";
  } else if (device.device.is_cuda() && device.gpu_fp16()) {
    // Before Ampere cuDNN has no bf16 convolutions and cuBLAS's bf16 products are slow, but
    // Volta's and Turing's tensor cores multiply fp16: what torch's autocast takes on CUDA, with
    // the loss scaled.
    c.precision = "fp16";
    c.precision_reason = "GPU of compute capability " + capability(device) +
                         " has fp16 tensor cores but no bf16 ones (8.0 on)";
  } else if (device.device.is_cuda()) {
    c.precision = "fp32";
    c.precision_reason =
        device.compute_capability > 0
            ? "GPU of compute capability " + capability(device) + " has no tensor cores (7.0 on)"
            : "GPU whose compute capability could not be read";
  } else if (topology.cpu.native_bf16() && !lowered && onednn_available) {
    c.precision = "bf16";
    c.precision_reason = topology.cpu.amx_bf16 ? "CPU has AMX-BF16" : "CPU has AVX-512 BF16";
  } else {
    c.precision = "fp32";
    c.precision_reason = !topology.cpu.native_bf16() ? "CPU has no native bf16"
                         : lowered                   ? "LOOM_CPU_CAPABILITY is below avx512"
                                                     : "LibTorch was built without oneDNN";
  }

  if (config.memory_format != "auto") {
    c.memory_format = config.memory_format;
    c.memory_format_reason = "set in runtime.memory_format";
  } else if (convolutional_model) {
    c.memory_format = "channels_last";
    c.memory_format_reason = "convolutional model";
  } else {
    c.memory_format = "contiguous";
    c.memory_format_reason = "no convolutions to gain from channels_last";
  }

  if (config.threads > 0) {
    c.threads = static_cast<int>(config.threads);
    c.threads_reason = "set in runtime.threads";
  } else {
    c.threads = topology.usable_cores;
    c.threads_reason = "usable cores";
  }
  return c;
}

}  // namespace loom::train
