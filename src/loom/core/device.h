// The device seam's first part (DESIGN.md, "Devices"): whether this process can use CUDA, and
// which device a rank takes. Loom links LibTorch's CPU libraries only. torch's CUDA library
// (libtorch_cuda.so, beside libtorch_cpu.so in the wheel, with the NVIDIA libraries it needs)
// registers CUDA with ATen when it is loaded, as `import torch` loads it; until then ATen answers
// every CUDA question with "no". Loom loads it at its first question about CUDA, and only where
// an NVIDIA driver is installed, so CPU hosts never map half a gigabyte of GPU code. ATen keeps
// its first answer, so every question about CUDA in Loom goes through here (never at::hasCUDA()
// or torch::cuda::device_count() directly).
//
// Threading: any thread; the loading happens once.
#pragma once

#include <c10/core/Device.h>

#include <string>

namespace loom {

struct CudaAvailability {
  int devices = 0;      // CUDA devices this process may use (CUDA_VISIBLE_DEVICES applies)
  std::string why_not;  // when devices == 0, why: for an error message
};

// Loads torch's CUDA library once, where the NVIDIA driver (libcuda.so.1) is installed, and
// says what this process can use.
const CudaAvailability& cuda_availability();

// Loads torch's CUDA library whether or not a driver is installed (without one it loads and
// finds no device). Returns false, with why, when it cannot be loaded (a CPU build of LibTorch
// has none). For the tests of the loading on hosts without a GPU; cuda_availability() is the
// question to ask otherwise.
bool load_torch_cuda_library(std::string* why_not = nullptr);

// CUDA device `index`'s compute capability as major * 10 + minor (90 for an H100, 75 for a T4),
// asked of the CUDA runtime that torch's CUDA library loaded; 0 when it cannot be asked (no
// such library or device). Tensor cores compute bf16 from 80 (Ampere) on.
int cuda_compute_capability(int index);

// Checks that `text` is one of runtime.device's values (auto, cpu, cuda, cuda:N) without asking
// whether CUDA can be used; throws ConfigError naming `key` (problem device) otherwise.
void check_device_text(const std::string& text, const std::string& key);

// A device of runtime.device's values: auto (CUDA device `local_rank` where this process can use
// CUDA, else the CPU), cpu, cuda (device `local_rank`), cuda:N. Throws ConfigError naming `key`
// with problem device (none of these), no_cuda (CUDA asked for where none can be used; why_not
// in its message) or device_index (N, or the local rank, past the devices there are).
c10::Device resolve_device(const std::string& text, int local_rank, const std::string& key);

}  // namespace loom
