// How a parameter-server exchange spreads gradient bytes over the servers (issue 16), as data
// that can be printed and checked before a step runs. Gradients are fused into buffers in the
// order they become ready in backward (the same buckets as all-reduce, bucket_plan.h); every
// buffer is cut into parts of at most `part_bytes` (and at least one per server while parts stay
// above a floor; a multiple of the server count where that is more), equal within the buffer to
// one element; each part goes to the server that has received the fewest bytes so far (ties:
// the lowest index).
//
// Why: whole tensors placed on servers (by hash or round robin) leave one server with the large
// layers and the others idle, the "hotspot" users of MXNet and TensorFlow report. Equal parts
// handed out least-loaded-first keep every server within one part's bytes of every other, and
// consecutive parts of a buffer land on different servers, so a buffer's push runs on all of
// them at once (BytePS's and SageMaker's "balanced fusion buffers").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace loom::parallel::ps {

struct Part {
  int buffer = 0;           // which fusion buffer
  std::int64_t offset = 0;  // first element within the buffer
  std::int64_t elements = 0;
  int server = 0;
};

struct PartPlan {
  int servers = 0;
  std::int64_t element_bytes = 0;
  std::vector<Part> parts;  // in push order: buffer by buffer, each from its start

  // Bytes each server receives from one worker per step.
  std::vector<std::int64_t> server_bytes() const;
  std::int64_t largest_part_bytes() const;
  // "24 parts of <= 4.0 MB over 4 servers: 25.2 / 25.2 / 24.9 / 24.9 MB".
  std::string describe() const;
};

// Throws Error for a non-positive server count, part size or element size, or a negative buffer
// size. A buffer is cut into at least one part per server as long as the parts stay at least
// `min_part_bytes` (smaller ones cost more in latency than they gain in spread); so a buffer of
// less than one part may still be several; an empty buffer has none.
PartPlan plan_parts(const std::vector<std::int64_t>& buffer_elements, std::int64_t element_bytes,
                    std::int64_t part_bytes, int servers, std::int64_t min_part_bytes = 64 << 10);

}  // namespace loom::parallel::ps
