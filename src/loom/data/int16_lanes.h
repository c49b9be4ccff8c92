// The 16-bit fixed-point vector operations the image kernels (gaussian_blur.cpp,
// bilinear_resize.cpp) are written in, once per instruction set: AVX-512 (32 lanes), AVX2
// (16 lanes) and a portable build on GCC's generic vectors (8 lanes; SSE2 on baseline x86-64,
// NEON elsewhere). A kernel is a template over one of these and is compiled for its instruction
// set by including it in that set's target region (see the kernel files).
//
// Pixels carry 6 fractional bits in int16 (255 x 64 = 16320, so the sum of two still fits) and
// weights are Q15: mulhrs(pixel, weight) multiplies and rounds back to the pixels' fixed point
// with one rounding, the same in every lane type, so every path gives identical results.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace loom::data::lanes {

constexpr int kFractionBits = 6;

// (a * b + 2^14) >> 15 on one value: what every lane type's mulhrs computes.
inline int16_t mulhrs(int32_t a, int32_t b) { return static_cast<int16_t>((a * b + 0x4000) >> 15); }

#define LOOM_LANES_INLINE static inline __attribute__((always_inline))

#if defined(__x86_64__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12 inside its AVX-512 headers

#define LOOM_LANES_AVX512 LOOM_LANES_INLINE __attribute__((target("avx512f,avx512bw,avx512vl")))
#define LOOM_LANES_AVX2 LOOM_LANES_INLINE __attribute__((target("avx2")))

struct Avx512 {
  using Reg = __m512i;
  static constexpr int kCount = 32;
  LOOM_LANES_AVX512 Reg splat(int16_t v) { return _mm512_set1_epi16(v); }
  LOOM_LANES_AVX512 Reg add(Reg a, Reg b) { return _mm512_add_epi16(a, b); }
  LOOM_LANES_AVX512 Reg sub(Reg a, Reg b) { return _mm512_sub_epi16(a, b); }
  LOOM_LANES_AVX512 Reg mulhrs(Reg a, Reg b) { return _mm512_mulhrs_epi16(a, b); }
  LOOM_LANES_AVX512 Reg to_fixed(Reg a) { return _mm512_slli_epi16(a, kFractionBits); }
  LOOM_LANES_AVX512 Reg load(const int16_t* p) { return _mm512_loadu_si512(p); }
  LOOM_LANES_AVX512 void store(Reg v, int16_t* p) { _mm512_storeu_si512(p, v); }
  // kCount bytes as int16, unscaled.
  LOOM_LANES_AVX512 Reg load_bytes(const uint8_t* p) {
    return _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  // The first `count` (< kCount) bytes, the rest zero; reads nothing past them.
  LOOM_LANES_AVX512 Reg load_bytes(const uint8_t* p, int count) {
    return _mm512_cvtepu8_epi16(_mm256_maskz_loadu_epi8((__mmask32{1} << count) - 1, p));
  }
  // Fixed point rounded to whole levels, saturated to 0..255.
  LOOM_LANES_AVX512 void store_bytes(Reg v, uint8_t* p) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtusepi16_epi8(levels(v)));
  }
  LOOM_LANES_AVX512 void store_bytes(Reg v, uint8_t* p, int count) {
    _mm256_mask_storeu_epi8(p, (__mmask32{1} << count) - 1, _mm512_cvtusepi16_epi8(levels(v)));
  }
  LOOM_LANES_AVX512 Reg levels(Reg v) {
    const __m512i half = _mm512_set1_epi16(1 << (kFractionBits - 1));
    return _mm512_srai_epi16(_mm512_add_epi16(v, half), kFractionBits);
  }
};

struct Avx2 {
  using Reg = __m256i;
  static constexpr int kCount = 16;
  LOOM_LANES_AVX2 Reg splat(int16_t v) { return _mm256_set1_epi16(v); }
  LOOM_LANES_AVX2 Reg add(Reg a, Reg b) { return _mm256_add_epi16(a, b); }
  LOOM_LANES_AVX2 Reg sub(Reg a, Reg b) { return _mm256_sub_epi16(a, b); }
  LOOM_LANES_AVX2 Reg mulhrs(Reg a, Reg b) { return _mm256_mulhrs_epi16(a, b); }
  LOOM_LANES_AVX2 Reg to_fixed(Reg a) { return _mm256_slli_epi16(a, kFractionBits); }
  LOOM_LANES_AVX2 Reg load(const int16_t* p) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  }
  LOOM_LANES_AVX2 void store(Reg v, int16_t* p) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v);
  }
  LOOM_LANES_AVX2 Reg load_bytes(const uint8_t* p) {
    return _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  LOOM_LANES_AVX2 Reg load_bytes(const uint8_t* p, int count) {
    alignas(16) uint8_t part[16] = {};
    std::memcpy(part, p, static_cast<size_t>(count));
    return load_bytes(part);
  }
  LOOM_LANES_AVX2 void store_bytes(Reg v, uint8_t* p) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), packed(v));
  }
  LOOM_LANES_AVX2 void store_bytes(Reg v, uint8_t* p, int count) {
    alignas(16) uint8_t part[16];
    _mm_store_si128(reinterpret_cast<__m128i*>(part), packed(v));
    std::memcpy(p, part, static_cast<size_t>(count));
  }
  // The 16 values rounded to levels and saturated to bytes, in order (packus works per 128-bit
  // half, so the halves are packed against each other).
  LOOM_LANES_AVX2 __m128i packed(Reg v) {
    const __m256i half = _mm256_set1_epi16(1 << (kFractionBits - 1));
    const __m256i rounded = _mm256_srai_epi16(_mm256_add_epi16(v, half), kFractionBits);
    return _mm_packus_epi16(_mm256_castsi256_si128(rounded), _mm256_extracti128_si256(rounded, 1));
  }
};

#pragma GCC diagnostic pop
#endif  // __x86_64__

// GCC's generic vectors, 16 bytes wide (SSE2 on baseline x86-64, NEON on ARM), with SSE2's
// 16-bit multiplies and packing where x86-64 has them (every x86-64 CPU does).
struct Portable {
  using Reg = int16_t __attribute__((vector_size(16)));
  using Wide = int32_t __attribute__((vector_size(32)));
  using Bytes = uint8_t __attribute__((vector_size(8)));
  static constexpr int kCount = 8;
  LOOM_LANES_INLINE Reg splat(int16_t v) { return Reg{} + v; }
  LOOM_LANES_INLINE Reg add(Reg a, Reg b) { return a + b; }
  LOOM_LANES_INLINE Reg sub(Reg a, Reg b) { return a - b; }
  LOOM_LANES_INLINE Reg mulhrs(Reg a, Reg b) {
#if defined(__SSE2__)
    // SSE2 has no 32-bit lane multiply (the widening form costs ~40 instructions), but its
    // 16-bit high and low halves give the same value: with p = a * b = hi * 2^16 + lo (lo
    // unsigned), (p + 2^14) >> 15 = 2 hi + ((lo >> 14) + 1) >> 1.
    const auto x = reinterpret_cast<__m128i>(a), y = reinterpret_cast<__m128i>(b);
    const __m128i hi = _mm_mulhi_epi16(x, y), lo = _mm_mullo_epi16(x, y);
    const __m128i carry =
        _mm_srli_epi16(_mm_add_epi16(_mm_srli_epi16(lo, 14), _mm_set1_epi16(1)), 1);
    return reinterpret_cast<Reg>(_mm_add_epi16(_mm_add_epi16(hi, hi), carry));
#else
    const Wide product = __builtin_convertvector(a, Wide) * __builtin_convertvector(b, Wide);
    return __builtin_convertvector((product + 0x4000) >> 15, Reg);
#endif
  }
  LOOM_LANES_INLINE Reg to_fixed(Reg a) { return a << kFractionBits; }
  LOOM_LANES_INLINE Reg load(const int16_t* p) {
    Reg v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
  LOOM_LANES_INLINE void store(Reg v, int16_t* p) { std::memcpy(p, &v, sizeof v); }
  LOOM_LANES_INLINE Reg load_bytes(const uint8_t* p) {
    Bytes b;
    std::memcpy(&b, p, sizeof b);
    return __builtin_convertvector(b, Reg);
  }
  LOOM_LANES_INLINE Reg load_bytes(const uint8_t* p, int count) {
    uint8_t part[kCount] = {};
    std::memcpy(part, p, static_cast<size_t>(count));
    return load_bytes(part);
  }
  LOOM_LANES_INLINE void store_bytes(Reg v, uint8_t* p) {
    const Bytes b = packed(v);
    std::memcpy(p, &b, sizeof b);
  }
  LOOM_LANES_INLINE void store_bytes(Reg v, uint8_t* p, int count) {
    const Bytes b = packed(v);
    std::memcpy(p, &b, static_cast<size_t>(count));
  }
  LOOM_LANES_INLINE Bytes packed(Reg v) {
    Reg level = (v + (1 << (kFractionBits - 1))) >> kFractionBits;
#if defined(__SSE2__)
    const __m128i bytes = _mm_packus_epi16(reinterpret_cast<__m128i>(level), _mm_setzero_si128());
    Bytes b;
    std::memcpy(&b, &bytes, sizeof b);
    return b;
#else
    level = level < 0 ? Reg{} : level;
    level = level > 255 ? Reg{} + 255 : level;
    return __builtin_convertvector(level, Bytes);
#endif
  }
};

}  // namespace loom::data::lanes
