#include "loom/comm/float_widening.h"

#include <c10/util/Half.h>

#include <cstdint>
#include <cstring>

#include "loom/core/error.h"

namespace loom::comm {
namespace {

// bfloat16 is the upper half of a float: widening is a shift, narrowing rounds to nearest even.
void widen_bf16(const std::uint16_t* in, float* out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t bits = static_cast<std::uint32_t>(in[i]) << 16;
    std::memcpy(out + i, &bits, sizeof bits);
  }
}

void narrow_bf16(const float* in, std::uint16_t* out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    std::uint32_t bits;
    std::memcpy(&bits, in + i, sizeof bits);
    const bool nan = (bits & 0x7fffffffu) > 0x7f800000u;
    const std::uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
    out[i] = nan ? 0x7fc0 : static_cast<std::uint16_t>(rounded);
  }
}

void check(c10::ScalarType dtype) {
  if (!widens_to_float(dtype)) {
    throw Error(std::string("float widening: ") + c10::toString(dtype) +
                " is not a 16-bit float type");
  }
}

}  // namespace

bool widens_to_float(c10::ScalarType dtype) {
  return dtype == c10::ScalarType::BFloat16 || dtype == c10::ScalarType::Half;
}

void widen_to_float(c10::ScalarType dtype, const void* in, float* out, std::size_t n) {
  check(dtype);
  if (dtype == c10::ScalarType::BFloat16) {
    return widen_bf16(static_cast<const std::uint16_t*>(in), out, n);
  }
  const auto* half = static_cast<const c10::Half*>(in);
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<float>(half[i]);
}

void narrow_from_float(c10::ScalarType dtype, const float* in, void* out, std::size_t n) {
  check(dtype);
  if (dtype == c10::ScalarType::BFloat16) {
    return narrow_bf16(in, static_cast<std::uint16_t*>(out), n);
  }
  auto* half = static_cast<c10::Half*>(out);
  for (std::size_t i = 0; i < n; ++i) half[i] = c10::Half(in[i]);
}

}  // namespace loom::comm
