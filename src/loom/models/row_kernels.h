// Float kernels over one row of a tensor (a row of logits), written so that
// the compiler vectorises them for AVX-512, AVX2 or the portable path (LOOM_CPU_CAPABILITY): plain
// loops, reductions kept in 16 partial lanes, and an exp of Loom's own (a call to expf does not
// vectorise). bf16 rows are widened into a float row in cache first and narrowed back after:
// loops over c10::BFloat16 objects do not vectorise. The fused language-model loss
// (token_cross_entropy_loss.cpp) is built from these.
#pragma once

#include <c10/core/ScalarType.h>
#include <c10/util/BFloat16.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "loom/core/cpu_capability.h"

namespace loom::models::rows {

// e^x in float within 2 ulp: x = n ln 2 + r with |r| <= ln 2 / 2 (ln 2 split in two for
// exactness), e^r by Cephes' degree-6 polynomial, 2^n built in the exponent bits. n is rounded by
// adding 1.5 x 2^23, which leaves it in the low mantissa bits. Inputs below -87.3 give e^-87.3,
// inputs above 88 e^88 (n stays within the exponent field's 2^-126 .. 2^127).
inline float exp(float x) {
  x = x < -87.3f ? -87.3f : (x > 88.0f ? 88.0f : x);
  constexpr float kRound = 12582912.0f;  // 1.5 x 2^23
  const float shifted = x * 1.44269504088896341f + kRound;
  const float n = shifted - kRound;
  std::int32_t n_bits;
  std::memcpy(&n_bits, &shifted, sizeof n_bits);
  const float r = x - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  // The low bits of `shifted` hold n + 2^22: n + 127 in the exponent field from there.
  const std::int32_t exponent = ((n_bits - 0x4B400000) + 127) << 23;
  float two_to_n;
  std::memcpy(&two_to_n, &exponent, sizeof two_to_n);
  return p * two_to_n;
}

// max_j x[j] (-inf for n = 0).
float max(const float* x, std::int64_t n);
// out[j] = e^(scale x[j] - shift) × factor; returns Σ_j of out[j] / factor. `out` may be `x`.
// The AVX2 path is written in intrinsics (the compiler leaves the loop scalar there).
float exp_into(const float* x, float* out, std::int64_t n, float scale, float shift, float factor,
               CpuCapability capability = cpu_capability());

// bf16 bits to float and back (rounded to nearest even, as c10's conversion, without its NaN
// case: these rows hold none).
void widen_bf16(const std::uint16_t* bf16, float* out, std::int64_t n);
void narrow_to_bf16(const float* x, std::uint16_t* out, std::int64_t n);

// Calls f(float{}) or f(c10::BFloat16{}) by `type` (bf16, or float for anything else: the caller
// converts other types to float first).
template <typename F>
void dispatch(c10::ScalarType type, const F& f) {
  if (type == c10::ScalarType::BFloat16) {
    f(c10::BFloat16{});
  } else {
    f(float{});
  }
}

// A row of float or bf16 elements as floats: the row itself, or widened into `scratch`.
inline const float* as_floats(const float* row, std::int64_t, std::vector<float>&) { return row; }
inline const float* as_floats(const c10::BFloat16* row, std::int64_t n,
                              std::vector<float>& scratch) {
  scratch.resize(static_cast<std::size_t>(n));
  widen_bf16(reinterpret_cast<const std::uint16_t*>(row), scratch.data(), n);
  return scratch.data();
}
// Where to compute a float row bound for `out`: `out` itself, or `scratch`, which store() then
// narrows into `out`.
inline float* float_target(float* out, std::int64_t, std::vector<float>&) { return out; }
inline float* float_target(c10::BFloat16*, std::int64_t n, std::vector<float>& scratch) {
  scratch.resize(static_cast<std::size_t>(n));
  return scratch.data();
}
inline void store(const float*, float*, std::int64_t) {}
inline void store(const float* row, c10::BFloat16* out, std::int64_t n) {
  narrow_to_bf16(row, reinterpret_cast<std::uint16_t*>(out), n);
}

}  // namespace loom::models::rows
