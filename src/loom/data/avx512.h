// What the data layer's AVX-512 kernels (gaussian_blur.cpp, bilinear_resize.cpp) share. Loom is
// built for baseline x86-64; these kernels are compiled for AVX-512 F, BW (its 16-bit
// instructions) and VL (its masked 256-bit loads and stores) function by function and called
// only after the CPU check below. Every CPU with BW so far also has VL.
#pragma once

#define LOOM_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))

namespace loom::data {

inline bool cpu_has_avx512() {
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") != 0 && __builtin_cpu_supports("avx512bw") != 0 &&
           __builtin_cpu_supports("avx512vl") != 0;
  }();
  return yes;
}

}  // namespace loom::data
