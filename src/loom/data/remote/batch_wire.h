// A Batch on the wire (data_service.proto's BatchReply): raw bytes, optionally LZ4, checked by a
// CRC-32C over the raw contents. The worker packs; the trainer unpacks and validates every
// field before use, since the bytes came from the network.
#pragma once

#include <grpcpp/support/byte_buffer.h>

#include <cstdint>

#include "loom/core/error.h"
#include "loom/data/batch_source.h"

namespace loom::data {

// Bumped whenever data_service.proto or the meaning of a field changes (2: inputs of any shape
// and type, targets of any shape, for token windows).
constexpr uint32_t kDataProtocolVersion = 2;

// A reply that fails a check: wrong sizes, undecodable LZ4, or a CRC that does not match (the
// trainer asks again for it).
class CorruptBatch : public DataError {
 public:
  using DataError::DataError;
};

// The serialised BatchReply, ready for gRPC. The inputs (images, token ids) are not copied: the
// buffer's last slice is the batch's own memory (or its LZ4 block), kept alive until gRPC has
// sent it. At 100+ MB/s of batches, a copy into the reply and another by protobuf's serialiser
// cost a third of a worker's core (measured with perf). `flip_image_byte` is for testing failure
// handling: one byte of the inputs is changed after the checksum was taken.
grpc::ByteBuffer pack_batch(const Batch& batch, int64_t epoch, int64_t step,
                            const LoaderStats& tally, double build_seconds, bool lz4,
                            bool flip_image_byte = false);

// What a trainer expects of a batch: its position, and what its own loader would make (at most
// layout.batch_size samples; the sample shapes and input type of layout).
struct BatchShape {
  int64_t epoch = 0, step = 0;
  BatchLayout layout;
};

// Checks a received reply and makes its batch, copying the inputs once from the received slices
// (protobuf's own parser would first copy them into a string); `tally` gets the worker's
// counts. Throws CorruptBatch saying what is wrong.
Batch unpack_batch(const grpc::ByteBuffer& reply, bool lz4, const BatchShape& expected,
                   LoaderStats& tally);

}  // namespace loom::data
