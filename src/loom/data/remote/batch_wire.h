// A Batch on the wire (data_service.proto's BatchReply): raw bytes, optionally LZ4, checked by a
// CRC-32C over the raw contents. The worker packs; the trainer unpacks and validates every
// field before use, since the bytes came from the network.
#pragma once

#include <cstdint>

#include "loom/core/error.h"
#include "loom/data/batch_source.h"

namespace loom::remote {
class BatchReply;
}

namespace loom::data {

// Bumped whenever data_service.proto or the meaning of a field changes.
constexpr uint32_t kDataProtocolVersion = 1;

// A reply that fails a check: wrong sizes, undecodable LZ4, or a CRC that does not match (the
// trainer asks again for it).
class CorruptBatch : public DataError {
 public:
  using DataError::DataError;
};

void pack_batch(const Batch& batch, const LoaderStats& tally, double build_seconds, bool lz4,
                remote::BatchReply& reply);

// What a trainer expects of a batch: its position, the image size its own transforms make,
// and at most `max_samples` samples.
struct BatchShape {
  int64_t epoch = 0, step = 0;
  int64_t max_samples = 0, height = 0, width = 0, channels = 0;
};

// Takes the reply's buffers (no copy of the images when not compressed); `tally` gets the
// worker's counts. Throws CorruptBatch saying what is wrong.
Batch unpack_batch(remote::BatchReply& reply, bool lz4, const BatchShape& expected,
                   LoaderStats& tally);

}  // namespace loom::data
