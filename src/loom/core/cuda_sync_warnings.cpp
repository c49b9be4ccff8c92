#include "loom/core/cuda_sync_warnings.h"

#include <dlfcn.h>

#include "loom/core/device.h"

namespace loom {

bool set_cuda_sync_warnings(bool on, std::string* why_not) {
  // c10::cuda::warning_state()'s static WarningState, in libc10_cuda.so, which loading torch's
  // CUDA library brings into the process's global scope. (Only the library is needed, not its
  // registration with ATen, which an earlier question about CUDA may have forestalled.)
  static std::string not_loaded;
  static int* const mode = [] {
    load_torch_cuda_library(&not_loaded);
    return static_cast<int*>(
        ::dlsym(RTLD_DEFAULT, "_ZZN3c104cuda13warning_stateEvE14warning_state_"));
  }();
  if (mode == nullptr) {
    if (why_not) {
      *why_not = "torch's CUDA library has no synchronisation debug mode to set" +
                 (not_loaded.empty() ? std::string() : " (" + not_loaded + ")");
    }
    return false;
  }
  constexpr int kWarn = 1;  // c10::cuda::SyncDebugMode::L_WARN
  static int before = 0;    // L_DISABLED, unless someone had set it
  if (on) {
    before = *mode;
    *mode = kWarn;
  } else {
    *mode = before;
  }
  return true;
}

}  // namespace loom
