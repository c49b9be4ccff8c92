// TensorBoard's record framing checks lengths and data with CRC-32C in TFRecord's "masked" form.
#pragma once

#include <cstddef>
#include <cstdint>

#include "loom/core/crc32c.h"

namespace loom::profile {

using loom::crc32c;

// TFRecord's masking, so that a CRC of data holding CRCs does not look like a CRC:
// ((crc >> 15) | (crc << 17)) + 0xa282ead8.
inline uint32_t masked_crc32c(const void* data, size_t size) {
  const uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

}  // namespace loom::profile
