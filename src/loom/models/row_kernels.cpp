#include "loom/models/row_kernels.h"

#include <limits>

namespace loom::models::rows {
namespace {

constexpr std::int64_t kLanes = 16;  // partial results, so that reductions vectorise

#define LOOM_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))

}  // namespace

LOOM_VECTOR_CLONES float max(const float* __restrict x, std::int64_t n) {
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

LOOM_VECTOR_CLONES float exp_into(const float* x, float* out, std::int64_t n, float scale,
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

LOOM_VECTOR_CLONES void widen_bf16(const std::uint16_t* __restrict bf16, float* __restrict out,
                                   std::int64_t n) {
  auto* bits = reinterpret_cast<Bits*>(out);
  for (std::int64_t j = 0; j < n; ++j) bits[j] = static_cast<std::uint32_t>(bf16[j]) << 16;
}

LOOM_VECTOR_CLONES void narrow_to_bf16(const float* __restrict x, std::uint16_t* __restrict out,
                                       std::int64_t n) {
  const auto* bits = reinterpret_cast<const Bits*>(x);
  for (std::int64_t j = 0; j < n; ++j) {
    out[j] = static_cast<std::uint16_t>((bits[j] + 0x7FFFu + ((bits[j] >> 16) & 1u)) >> 16);
  }
}

}  // namespace loom::models::rows
