#include "loom/models/row_kernels.h"

#include <limits>

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
  float total = 0;
  for (std::int64_t k = 0; k < kLanes; ++k) total += lane[k];
  for (std::int64_t j = whole; j < n; ++j) {
    const float e = exp(scale * x[j] - shift);
    total += e;
    out[j] = e * factor;
  }
  return total;
}

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

float exp_into(const float* x, float* out, std::int64_t n, float scale, float shift, float factor) {
  static const auto build = kernel_for<exp_into_body>(cpu_capability());
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
