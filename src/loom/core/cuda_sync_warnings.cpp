#include "loom/core/cuda_sync_warnings.h"

#include <dlfcn.h>

#include "loom/core/device.h"

namespace loom {

bool set_cuda_sync_warnings(bool on, std::string* why_not) {
  if (!load_torch_cuda_library(why_not)) return false;
  // c10::cuda::warning_state()'s static WarningState, in libc10_cuda.so (loaded with
  // libtorch_cuda.so, into the process's global scope).
  static int* const mode =
      static_cast<int*>(::dlsym(RTLD_DEFAULT, "_ZZN3c104cuda13warning_stateEvE14warning_state_"));
  if (mode == nullptr) {
    if (why_not) *why_not = "torch's CUDA library has no synchronisation debug mode to set";
    return false;
  }
  constexpr int kDisabled = 0, kWarn = 1;  // c10::cuda::SyncDebugMode::L_DISABLED, L_WARN
  *mode = on ? kWarn : kDisabled;
  return true;
}

}  // namespace loom
