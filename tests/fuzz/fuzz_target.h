// One fuzz target = one function from bytes to nothing, which must neither crash nor hang nor
// throw anything but the errors its input deserves. The same source builds two ways:
//  - with LOOM_LIBFUZZER (make fuzz, clang): the function becomes LLVMFuzzerTestOneInput of a
//    libFuzzer binary of its own, instrumented for coverage, ASan and UBSan;
//  - otherwise: it registers itself by name in loom_fuzz_replay, which the ordinary test suite
//    runs over the corpus in tests/fuzz/corpus/<name>/ (seeds and every input that ever crashed).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace loom::fuzz {

using TargetFunction = void (*)(const uint8_t* data, size_t size);

// The replay binary's registry; a no-op under libFuzzer.
bool register_target(const char* name, TargetFunction function);

// An invariant the code under test broke: a crash libFuzzer records, even in Release builds.
[[noreturn]] inline void broken(const char* what) {
  std::fprintf(stderr, "fuzz invariant broken: %s\n", what);
  std::abort();
}

}  // namespace loom::fuzz

#ifdef LOOM_LIBFUZZER
#define LOOM_FUZZ_TARGET(name)                                              \
  static void loom_fuzz_##name(const uint8_t* data, size_t size);           \
  extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { \
    loom_fuzz_##name(data, size);                                           \
    return 0;                                                               \
  }                                                                         \
  static void loom_fuzz_##name(const uint8_t* data, size_t size)
#else
#define LOOM_FUZZ_TARGET(name)                                     \
  static void loom_fuzz_##name(const uint8_t* data, size_t size);  \
  [[maybe_unused]] static const bool loom_fuzz_registered_##name = \
      ::loom::fuzz::register_target(#name, loom_fuzz_##name);      \
  static void loom_fuzz_##name(const uint8_t* data, size_t size)
#endif
