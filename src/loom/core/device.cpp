#include "loom/core/device.h"

#include <ATen/Context.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <dlfcn.h>

#include <filesystem>
#include <mutex>

#include "loom/core/error.h"

namespace loom {
namespace {

// The folder of the libtorch_cpu.so this process runs: torch's CUDA library is its neighbour.
std::string torch_library_folder() {
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&at::globalContext), &info) == 0 || !info.dli_fname) {
    return "";
  }
  return std::filesystem::path(info.dli_fname).parent_path().string();
}

bool driver_installed() {
  // Loaded for good: torch's CUDA runtime loads it again to reach the GPU.
  return ::dlopen("libcuda.so.1", RTLD_LAZY | RTLD_GLOBAL) != nullptr;
}

}  // namespace

bool load_torch_cuda_library(std::string* why_not) {
  static std::once_flag once;
  static bool loaded = false;
  static std::string failure;
  std::call_once(once, [] {
    const std::string folder = torch_library_folder();
    const std::string path = folder + "/libtorch_cuda.so";
    if (folder.empty() || !std::filesystem::exists(path)) {
      failure = "this LibTorch has no CUDA library (" + (folder.empty() ? "?" : path) +
                " is missing: a CPU build)";
      return;
    }
    // RTLD_GLOBAL: the NVIDIA libraries it brings are the ones every later CUDA user binds to.
    if (::dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL) == nullptr) {
      const char* error = ::dlerror();
      failure = "torch's CUDA library did not load: " + std::string(error ? error : path);
      return;
    }
    loaded = at::detail::getCUDAHooks().hasCUDART();
    if (!loaded) failure = "torch's CUDA library loaded but did not register with ATen";
  });
  if (!loaded && why_not) *why_not = failure;
  return loaded;
}

const CudaAvailability& cuda_availability() {
  static const CudaAvailability availability = [] {
    CudaAvailability found;
    if (!driver_installed()) {
      found.why_not = "no NVIDIA driver here (libcuda.so.1 cannot be loaded)";
      return found;
    }
    if (!load_torch_cuda_library(&found.why_not)) return found;
    found.devices = at::detail::getCUDAHooks().getNumGPUs();
    if (found.devices == 0) found.why_not = "the NVIDIA driver reports no usable CUDA device";
    return found;
  }();
  return availability;
}

int cuda_compute_capability(int index) {
  if (cuda_availability().devices <= index || index < 0) return 0;
  // The CUDA runtime's C entry point, from the libcudart that libtorch_cuda.so brought into the
  // process's global scope: Loom links none of CUDA itself.
  using GetAttribute = int (*)(int* value, int attribute, int device);
  static const auto get_attribute =
      reinterpret_cast<GetAttribute>(::dlsym(RTLD_DEFAULT, "cudaDeviceGetAttribute"));
  if (!get_attribute) return 0;
  constexpr int kMajor = 75, kMinor = 76;  // cudaDevAttrComputeCapabilityMajor, ...Minor
  int major = 0, minor = 0;
  if (get_attribute(&major, kMajor, index) != 0 || get_attribute(&minor, kMinor, index) != 0) {
    return 0;
  }
  return major * 10 + minor;
}

void check_device_text(const std::string& text, const std::string& key) {
  if (text == "auto" || text == "cpu" || text == "cuda") return;
  if (text.rfind("cuda:", 0) != 0) {
    throw ConfigError(key + ": expected auto, cpu, cuda or cuda:N, got '" + text + "'",
                      {{"key", key},
                       {"problem", "device"},
                       {"value", text},
                       {"allowed", "auto, cpu, cuda, cuda:N"}});
  }
  try {
    (void)c10::Device(text);
  } catch (const c10::Error&) {
    throw ConfigError(key + ": '" + text + "' is not a CUDA device (cuda:N)",
                      {{"key", key}, {"problem", "device"}, {"value", text}});
  }
}

c10::Device resolve_device(const std::string& text, int local_rank, const std::string& key) {
  check_device_text(text, key);
  if (text == "cpu") return c10::Device(c10::kCPU);
  const CudaAvailability& cuda = cuda_availability();
  if (text == "auto" && cuda.devices == 0) return c10::Device(c10::kCPU);
  const int index = text.rfind("cuda:", 0) == 0 ? c10::Device(text).index() : local_rank;
  if (cuda.devices == 0) {
    throw ConfigError(key + ": '" + text + "' asks for a GPU, and " + cuda.why_not,
                      {{"key", key}, {"problem", "no_cuda"}, {"value", text}});
  }
  if (index < 0 || index >= cuda.devices) {
    throw ConfigError(key + ": CUDA device " + std::to_string(index) + " of " +
                          std::to_string(cuda.devices) + " asked for" +
                          (text == "cuda" || text == "auto" ? " (the local rank)" : ""),
                      {{"key", key},
                       {"problem", "device_index"},
                       {"value", std::to_string(index)},
                       {"devices", std::to_string(cuda.devices)}});
  }
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index));
}

}  // namespace loom
