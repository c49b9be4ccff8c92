// What a trainer reads from a data worker: a BatchReply. Input: one byte (bit 0: the session
// asked for LZ4; bit 1: it expects token windows rather than images), then the reply.
// unpack_batch must refuse anything inconsistent with a CorruptBatch and never read past what
// arrived; a batch it accepts has the expected shape and type.
#include <grpcpp/support/byte_buffer.h>

#include "fuzz_target.h"
#include "loom/data/remote/batch_wire.h"

LOOM_FUZZ_TARGET(batch_reply) {
  if (size < 1) return;
  const bool lz4 = data[0] & 1;
  grpc::Slice slice(data + 1, size - 1);
  grpc::ByteBuffer reply(&slice, 1);
  const bool tokens = data[0] & 2;
  loom::data::BatchShape expected;
  expected.step = 3;
  expected.layout.batch_size = 4;
  expected.layout.input_dims = tokens ? std::vector<int64_t>{5} : std::vector<int64_t>{5, 6, 3};
  expected.layout.target_dims = tokens ? std::vector<int64_t>{5} : std::vector<int64_t>{};
  expected.layout.input_dtype = tokens ? at::kLong : at::kByte;
  loom::data::LoaderStats tally;
  try {
    const loom::data::Batch batch = loom::data::unpack_batch(reply, lz4, expected, tally);
    const auto n = batch.inputs.size(0);
    std::vector<int64_t> inputs = {n}, targets = {n};
    for (int64_t d : expected.layout.input_dims) inputs.push_back(d);
    for (int64_t d : expected.layout.target_dims) targets.push_back(d);
    if (n > 4 || batch.inputs.sizes() != inputs || batch.targets.sizes() != targets ||
        batch.inputs.scalar_type() != expected.layout.input_dtype ||
        batch.indices.sizes() != std::vector<int64_t>{n}) {
      loom::fuzz::broken("an accepted batch does not have the expected shape");
    }
  } catch (const loom::DataError&) {
  }
}
