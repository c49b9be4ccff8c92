// What a trainer reads from a data worker: a BatchReply. Input: one byte (bit 0: the session
// asked for LZ4), then the reply. unpack_batch must refuse anything inconsistent with a
// CorruptBatch and never read past what arrived; a batch it accepts has the expected shape.
#include <grpcpp/support/byte_buffer.h>

#include "fuzz_target.h"
#include "loom/data/remote/batch_wire.h"

LOOM_FUZZ_TARGET(batch_reply) {
  if (size < 1) return;
  const bool lz4 = data[0] & 1;
  grpc::Slice slice(data + 1, size - 1);
  grpc::ByteBuffer reply(&slice, 1);
  const loom::data::BatchShape expected{0, 3, 4, 5, 6, 3};
  loom::data::LoaderStats tally;
  try {
    const loom::data::Batch batch = loom::data::unpack_batch(reply, lz4, expected, tally);
    const auto n = batch.inputs.size(0);
    if (n > 4 || batch.inputs.size(1) != 5 || batch.inputs.size(2) != 6 ||
        batch.inputs.size(3) != 3 || batch.targets.size(0) != n) {
      loom::fuzz::broken("an accepted batch does not have the expected shape");
    }
  } catch (const loom::DataError&) {
  }
}
