#include "loom/models/row_kernels.h"

#include <limits>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "loom/core/cpu_capability.h"

namespace loom::models::rows {
namespace {

constexpr std::int64_t kLanes = 16;  // partial results, so that reductions vectorise

// Each body is compiled for AVX-512, AVX2 and the portable path (kernel_for), and the public
// function calls the build LOOM_CPU_CAPABILITY chose.

LOOM_ALWAYS_INLINE float max_body(const float* __restrict x, std::int64_t n) {
  float lane[kLanes];
  for (std::int64_t k = 0; k < kLanes; ++k) lane[k] = -std::numeric_limits<float>::infinity();
  const std::int64_t whole = n / kLanes * kLanes;
  for (std::int64_t j = 0; j < whole; j += kLanes) {
    for (std::int64_t k = 0; k < kLanes; ++k) lane[k] = x[j + k] > lane[k] ? x[j + k] : lane[k];
  }
  float top = -std::numeric_limits<float>::infinity();
  for (std::int64_t k = 0; k < kLanes; ++k) top = lane[k] > top ? lane[k] : top;
  for (std::int64_t j = whole; j < n; ++j) top = x[j] > top ? x[j] : top;
  return top;
}

// exp_into's end, for every build: the partial lanes summed in order, then the elements past the
// last whole group of kLanes one at a time.
LOOM_ALWAYS_INLINE float exp_into_tail(const float* lane, const float* x, float* out,
                                       std::int64_t whole, std::int64_t n, float scale,
                                       float shift, float factor) {
  float total = 0;
  for (std::int64_t k = 0; k < kLanes; ++k) total += lane[k];
  for (std::int64_t j = whole; j < n; ++j) {
    const float e = exp(scale * x[j] - shift);
    total += e;
    out[j] = e * factor;
  }
  return total;
}

LOOM_ALWAYS_INLINE float exp_into_body(const float* x, float* out, std::int64_t n, float scale,
                                       float shift, float factor) {
  float lane[kLanes] = {};
  const std::int64_t whole = n / kLanes * kLanes;
  for (std::int64_t j = 0; j < whole; j += kLanes) {
    for (std::int64_t k = 0; k < kLanes; ++k) {
      const float e = exp(scale * x[j + k] - shift);
      lane[k] += e;
      out[j + k] = e * factor;
    }
  }
  return exp_into_tail(lane, x, out, whole, n, scale, shift, factor);
}

#if defined(__x86_64__)
// exp_into for AVX2 written out in intrinsics: GCC 12 leaves exp_into_body scalar for AVX2
// ("control flow in loop" after inlining exp), which cost the Llama fine-tune 16% of its step.
// The same steps as rows::exp, eight lanes at a time, with fused multiply-adds.
LOOM_TARGET_AVX2 inline __m256 exp8(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.0f));
  const __m256 round = _mm256_set1_ps(12582912.0f);  // 1.5 x 2^23
  const __m256 shifted = _mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), round);
  const __m256 n = _mm256_sub_ps(shifted, round);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fmadd_ps(n, _mm256_set1_ps(2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0f));
  const __m256i exponent = _mm256_slli_epi32(
      _mm256_add_epi32(
          _mm256_sub_epi32(_mm256_castps_si256(shifted), _mm256_set1_epi32(0x4B400000)),
          _mm256_set1_epi32(127)),
      23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(exponent));
}

// Sixteen lanes in two registers and the tail as the body does, so the sum adds up the same
// partial lanes in the same order.
LOOM_TARGET_AVX2 float exp_into_avx2(const float* x, float* out, std::int64_t n, float scale,
                                     float shift, float factor) {
  const __m256 scales = _mm256_set1_ps(scale), shifts = _mm256_set1_ps(shift),
               factors = _mm256_set1_ps(factor);
  __m256 low = _mm256_setzero_ps(), high = _mm256_setzero_ps();
  const std::int64_t whole = n / kLanes * kLanes;
  for (std::int64_t j = 0; j < whole; j += kLanes) {
    const __m256 e0 = exp8(_mm256_fmsub_ps(scales, _mm256_loadu_ps(x + j), shifts));
    const __m256 e1 = exp8(_mm256_fmsub_ps(scales, _mm256_loadu_ps(x + j + 8), shifts));
    low = _mm256_add_ps(low, e0);
    high = _mm256_add_ps(high, e1);
    _mm256_storeu_ps(out + j, _mm256_mul_ps(e0, factors));
    _mm256_storeu_ps(out + j + 8, _mm256_mul_ps(e1, factors));
  }
  float lane[kLanes];
  _mm256_storeu_ps(lane, low);
  _mm256_storeu_ps(lane + 8, high);
  return exp_into_tail(lane, x, out, whole, n, scale, shift, factor);
}
#endif

using Bits = std::uint32_t __attribute__((may_alias));

LOOM_ALWAYS_INLINE void widen_bf16_body(const std::uint16_t* __restrict bf16, float* __restrict out,
                                        std::int64_t n) {
  auto* bits = reinterpret_cast<Bits*>(out);
  for (std::int64_t j = 0; j < n; ++j) bits[j] = static_cast<std::uint32_t>(bf16[j]) << 16;
}

LOOM_ALWAYS_INLINE void narrow_to_bf16_body(const float* __restrict x,
                                            std::uint16_t* __restrict out, std::int64_t n) {
  const auto* bits = reinterpret_cast<const Bits*>(x);
  for (std::int64_t j = 0; j < n; ++j) {
    out[j] = static_cast<std::uint16_t>((bits[j] + 0x7FFFu + ((bits[j] >> 16) & 1u)) >> 16);
  }
}

}  // namespace

float max(const float* x, std::int64_t n) {
  static const auto build = kernel_for<max_body>(cpu_capability());
  return build(x, n);
}

float exp_into(const float* x, float* out, std::int64_t n, float scale, float shift, float factor,
               CpuCapability capability) {
  using Build = float (*)(const float*, float*, std::int64_t, float, float, float);
  const Build portable = kernel_for<exp_into_body>(CpuCapability::kDefault);
#if defined(__x86_64__)
  const Build avx2 = &exp_into_avx2;
#else
  const Build avx2 = portable;
#endif
  const Build build =
      for_capability(capability, kernel_for<exp_into_body>(CpuCapability::kAvx512), avx2, portable);
  return build(x, out, n, scale, shift, factor);
}

void widen_bf16(const std::uint16_t* bf16, float* out, std::int64_t n) {
  static const auto build = kernel_for<widen_bf16_body>(cpu_capability());
  build(bf16, out, n);
}

void narrow_to_bf16(const float* x, std::uint16_t* out, std::int64_t n) {
  static const auto build = kernel_for<narrow_to_bf16_body>(cpu_capability());
  build(x, out, n);
}

}  // namespace loom::models::rows
