#include "loom/core/cuda_sync_warnings.h"

#include <dlfcn.h>

#include <mutex>

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
  // Counted, for training loops on threads of one process (each turns them on for its run): the
  // last to turn them off restores the mode the first found.
  constexpr int kWarn = 1;  // c10::cuda::SyncDebugMode::L_WARN
  static std::mutex mutex;
  static int users = 0;
  static int before = 0;  // L_DISABLED, unless someone had set it
  const std::lock_guard<std::mutex> lock(mutex);
  if (on) {
    if (users++ == 0) before = *mode;
    *mode = kWarn;
  } else if (users > 0 && --users == 0) {
    *mode = before;
  }
  return true;
}

}  // namespace loom
