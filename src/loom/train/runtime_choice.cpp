#include "loom/train/runtime_choice.h"

namespace loom::train {

RuntimeChoice choose_runtime(const RuntimeConfig& config, const Topology& topology,
                             bool convolutional_model, bool onednn_available) {
  RuntimeChoice c;
  // LOOM_CPU_CAPABILITY below avx512 stands in for a host without AVX-512, bf16 included, so
  // that a forced run makes the choices such a host would.
  const bool lowered = topology.kernels != CpuCapability::kAvx512;
  if (config.precision != "auto") {
    c.precision = config.precision;
    c.precision_reason = "set in runtime.precision";
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
