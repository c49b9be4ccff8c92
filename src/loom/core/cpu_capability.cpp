#include "loom/core/cpu_capability.h"

#include <string>

#include "loom/core/error.h"
#include "loom/core/settings.h"

namespace loom {

CpuCapability detected_cpu_capability() {
#if defined(__x86_64__)
  static const CpuCapability detected = [] {
    // __builtin_cpu_supports checks the OS's register saving (XCR0) as well as CPUID.
    __builtin_cpu_init();
    const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    if (avx512) return CpuCapability::kAvx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
      return CpuCapability::kAvx2;
    return CpuCapability::kDefault;
  }();
  return detected;
#else
  return CpuCapability::kDefault;
#endif
}

CpuCapability parse_cpu_capability(std::string_view text, std::string_view key) {
  if (text == "avx512") return CpuCapability::kAvx512;
  if (text == "avx2") return CpuCapability::kAvx2;
  if (text == "default") return CpuCapability::kDefault;
  throw ConfigError(std::string(key) + ": expected avx512, avx2 or default, got '" +
                    std::string(text) + "'");
}

CpuCapability cpu_capability() {
  // Process-wide like ATen's own choice: every kernel of one process runs the same path.
  static const CpuCapability chosen = [] {
    const std::string forced = setting("LOOM_CPU_CAPABILITY");
    const CpuCapability detected = detected_cpu_capability();
    if (forced.empty()) return detected;
    const CpuCapability asked = parse_cpu_capability(forced, "LOOM_CPU_CAPABILITY");
    return asked < detected ? asked : detected;
  }();
  return chosen;
}

std::string_view to_string(CpuCapability capability) {
  switch (capability) {
    case CpuCapability::kAvx512:
      return "avx512";
    case CpuCapability::kAvx2:
      return "avx2";
    case CpuCapability::kDefault:
      break;
  }
  return "default";
}

std::vector<CpuCapability> runnable_cpu_capabilities() {
  std::vector<CpuCapability> runnable;
  for (auto c : {CpuCapability::kAvx512, CpuCapability::kAvx2, CpuCapability::kDefault}) {
    if (c <= detected_cpu_capability()) runnable.push_back(c);
  }
  return runnable;
}

}  // namespace loom
