// Which instruction set Loom's hand-vectorised kernels run on: AVX-512 (F, BW, VL, DQ), AVX2
// (with FMA), or a portable path that compiles anywhere. The best one the CPU and the OS support
// is chosen once, at first use; LOOM_CPU_CAPABILITY=avx512|avx2|default lowers it (never raises
// it past what the CPU has), as ATEN_CPU_CAPABILITY does for LibTorch's own kernels. CI forces
// each lower path so that what AVX2-only and other hosts run is tested on every machine.
//
// A kernel is written once and compiled for each path (see `LOOM_TARGET_AVX512` below); callers
// pick the function for a capability with `for_capability`. Kernels whose tests must run every
// path take the capability as an argument, defaulting to `cpu_capability()`.
#pragma once

#include <string_view>
#include <vector>

namespace loom {

enum class CpuCapability { kDefault = 0, kAvx2 = 1, kAvx512 = 2 };

// The best path this CPU and OS can run (CPUID and XCR0), whatever the environment says.
CpuCapability detected_cpu_capability();

// The path Loom's kernels take in this process: the detected one, lowered by
// LOOM_CPU_CAPABILITY when set. Read once; throws ConfigError naming the variable for a value
// other than avx512, avx2 or default.
CpuCapability cpu_capability();

// Parses "avx512", "avx2" or "default"; throws ConfigError naming `key` otherwise.
CpuCapability parse_cpu_capability(std::string_view text, std::string_view key);

// "avx512", "avx2" or "default".
std::string_view to_string(CpuCapability capability);

// Every path this CPU can run, best first: what a test runs each kernel under.
std::vector<CpuCapability> runnable_cpu_capabilities();

// The function among three builds of one kernel that `capability` runs.
template <typename Function>
Function for_capability(CpuCapability capability, Function avx512, Function avx2,
                        Function portable) {
  switch (capability) {
    case CpuCapability::kAvx512:
      return avx512;
    case CpuCapability::kAvx2:
      return avx2;
    case CpuCapability::kDefault:
      break;
  }
  return portable;
}

}  // namespace loom

// Function attributes that compile one function for a path. A kernel's body is written once as
// an always-inline template or function (`LOOM_ALWAYS_INLINE`) and wrapped three times: inlined
// into a wrapper with one of these attributes, the body is vectorised for that instruction set,
// while the body itself, and anything from headers it calls, stays baseline code (so no
// AVX-512 instruction can reach a function the linker shares with baseline callers).
#if defined(__x86_64__)
#define LOOM_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")))
#define LOOM_TARGET_AVX2 __attribute__((target("avx2,fma")))
#else
#define LOOM_TARGET_AVX512
#define LOOM_TARGET_AVX2
#endif
#define LOOM_ALWAYS_INLINE inline __attribute__((always_inline))

namespace loom {
namespace detail {

template <auto kBody, typename Signature>
struct KernelBuilds;

template <auto kBody, typename R, typename... Args>
struct KernelBuilds<kBody, R (*)(Args...)> {
  LOOM_TARGET_AVX512 static R avx512(Args... args) { return kBody(args...); }
  LOOM_TARGET_AVX2 static R avx2(Args... args) { return kBody(args...); }
  static R portable(Args... args) { return kBody(args...); }
};

}  // namespace detail

// The build of kernel `kBody` (a LOOM_ALWAYS_INLINE function whose loops the compiler
// vectorises) for `capability`: the body inlined into a function compiled for that instruction
// set. Callers keep the pointer (the choice is made once per process).
template <auto kBody>
auto kernel_for(CpuCapability capability) {
  using Builds = detail::KernelBuilds<kBody, decltype(kBody)>;
  return for_capability(capability, &Builds::avx512, &Builds::avx2, &Builds::portable);
}

}  // namespace loom
