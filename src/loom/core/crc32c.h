// CRC-32C (Castagnoli), the checksum of every batch that crosses the network: iSCSI's, ext4's
// and gRPC's choice, with a hardware instruction on x86-64 (SSE4.2) that checks several GB/s on
// one core. Falls back to a table when the CPU lacks it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace loom {

// The CRC of `size` bytes, continuing from `crc` (0 to start): crc32c(b, crc32c(a)) equals the
// CRC of a followed by b.
uint32_t crc32c(const void* data, size_t size, uint32_t crc = 0);

}  // namespace loom
