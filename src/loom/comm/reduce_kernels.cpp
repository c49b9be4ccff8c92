#include "loom/comm/reduce_kernels.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "loom/core/cpu_capability.h"
#include "loom/core/error.h"

namespace loom::comm {
namespace {

// Blocks of this many elements are summed in a small accumulator that stays in L1, so each input
// is streamed once and the output written once.
constexpr std::size_t kBlock = 1024;

// The compiler vectorises these loops; kernel_for builds them for AVX-512, AVX2 and the portable
// path, and reduce_sum calls the build LOOM_CPU_CAPABILITY chose.

LOOM_ALWAYS_INLINE void sum_float(float* out, const void* const* inputs, int count, std::size_t n,
                                  float scale) {
  float acc[kBlock];
  for (std::size_t start = 0; start < n; start += kBlock) {
    const std::size_t len = std::min(kBlock, n - start);
    const auto* first = static_cast<const float*>(inputs[0]) + start;
    for (std::size_t i = 0; i < len; ++i) acc[i] = first[i];
    for (int k = 1; k < count; ++k) {
      const auto* in = static_cast<const float*>(inputs[k]) + start;
      for (std::size_t i = 0; i < len; ++i) acc[i] += in[i];
    }
    float* dst = out + start;
    if (scale != 1.0f) {
      for (std::size_t i = 0; i < len; ++i) dst[i] = acc[i] * scale;
    } else {
      for (std::size_t i = 0; i < len; ++i) dst[i] = acc[i];
    }
  }
}

LOOM_ALWAYS_INLINE void sum_double(double* out, const void* const* inputs, int count, std::size_t n,
                                   double scale) {
  double acc[kBlock];
  for (std::size_t start = 0; start < n; start += kBlock) {
    const std::size_t len = std::min(kBlock, n - start);
    const auto* first = static_cast<const double*>(inputs[0]) + start;
    for (std::size_t i = 0; i < len; ++i) acc[i] = first[i];
    for (int k = 1; k < count; ++k) {
      const auto* in = static_cast<const double*>(inputs[k]) + start;
      for (std::size_t i = 0; i < len; ++i) acc[i] += in[i];
    }
    for (std::size_t i = 0; i < len; ++i) out[start + i] = acc[i] * scale;
  }
}

// bfloat16 is the upper half of a float: widening is a shift, narrowing rounds to nearest even
// (NaN kept quiet), the same rounding as c10::BFloat16.
inline float widen_bf16(std::uint16_t bits) {
  const std::uint32_t wide = static_cast<std::uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &wide, sizeof value);
  return value;
}

inline std::uint16_t narrow_bf16(float value) {
  std::uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;  // NaN
  const std::uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>((bits + rounding) >> 16);
}

LOOM_ALWAYS_INLINE void sum_bf16(std::uint16_t* out, const void* const* inputs, int count,
                                 std::size_t n, float scale) {
  float acc[kBlock];
  for (std::size_t start = 0; start < n; start += kBlock) {
    const std::size_t len = std::min(kBlock, n - start);
    const auto* first = static_cast<const std::uint16_t*>(inputs[0]) + start;
    for (std::size_t i = 0; i < len; ++i) acc[i] = widen_bf16(first[i]);
    for (int k = 1; k < count; ++k) {
      const auto* in = static_cast<const std::uint16_t*>(inputs[k]) + start;
      for (std::size_t i = 0; i < len; ++i) acc[i] += widen_bf16(in[i]);
    }
    for (std::size_t i = 0; i < len; ++i) out[start + i] = narrow_bf16(acc[i] * scale);
  }
}

template <typename Int>
void sum_integer(Int* out, const void* const* inputs, int count, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    Int total = 0;
    for (int k = 0; k < count; ++k) total += static_cast<const Int*>(inputs[k])[i];
    out[i] = total;
  }
}

}  // namespace

bool reducible(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::ScalarType::Float:
    case c10::ScalarType::Double:
    case c10::ScalarType::BFloat16:
    case c10::ScalarType::Int:
    case c10::ScalarType::Long:
      return true;
    default:
      return false;
  }
}

void reduce_sum(c10::ScalarType dtype, void* out, const void* const* inputs, int count,
                std::size_t elements, double scale) {
  switch (dtype) {
    case c10::ScalarType::Float: {
      static const auto build = kernel_for<sum_float>(cpu_capability());
      return build(static_cast<float*>(out), inputs, count, elements, static_cast<float>(scale));
    }
    case c10::ScalarType::Double: {
      static const auto build = kernel_for<sum_double>(cpu_capability());
      return build(static_cast<double*>(out), inputs, count, elements, scale);
    }
    case c10::ScalarType::BFloat16: {
      static const auto build = kernel_for<sum_bf16>(cpu_capability());
      return build(static_cast<std::uint16_t*>(out), inputs, count, elements,
                   static_cast<float>(scale));
    }
    case c10::ScalarType::Int:
    case c10::ScalarType::Long:
      if (scale != 1.0) throw CommError("reduce: integer tensors can be summed, not averaged");
      if (dtype == c10::ScalarType::Int) {
        return sum_integer(static_cast<std::int32_t*>(out), inputs, count, elements);
      }
      return sum_integer(static_cast<std::int64_t*>(out), inputs, count, elements);
    default:
      throw CommError(std::string("reduce: element type ") + c10::toString(dtype) +
                      " cannot be reduced (float, double, bfloat16, int32, int64 can)");
  }
}

}  // namespace loom::comm
