#include "loom/comm/tcp_ring_plans.h"

#include <algorithm>

#include "loom/core/error.h"

namespace loom::comm {
namespace {

using Receive = TransferPlan::Receive;
using OnReceive = TransferPlan::OnReceive;

int mod(int value, int world) { return ((value % world) + world) % world; }

// The chunks of a block of `count` elements, in elements: [first, first + length).
std::vector<std::pair<std::size_t, std::size_t>> chunks_of(std::size_t count,
                                                           std::size_t element_size,
                                                           std::size_t chunk_bytes) {
  const std::size_t per = std::max<std::size_t>(1, chunk_bytes / element_size);
  std::vector<std::pair<std::size_t, std::size_t>> chunks;
  for (std::size_t first = 0; first < count; first += per) {
    chunks.emplace_back(first, std::min(per, count - first));
  }
  return chunks;
}

void check_shape(const RingBlocks& blocks, const RingShape& ring) {
  if (ring.world < 1 || ring.rank < 0 || ring.rank >= ring.world ||
      static_cast<int>(blocks.count.size()) != ring.world ||
      blocks.offset.size() != blocks.count.size()) {
    throw Error("ring plan: " + std::to_string(blocks.count.size()) + " blocks for rank " +
                std::to_string(ring.rank) + " of " + std::to_string(ring.world));
  }
}

// The receive index of each chunk of the block received in the step before; a step's sends go
// once the matching chunk of the previous step is done (0: no wait).
std::vector<std::size_t> afters(const std::vector<std::size_t>& previous, std::size_t chunks) {
  std::vector<std::size_t> after(chunks, 0);
  for (std::size_t j = 0; j < chunks && j < previous.size(); ++j) after[j] = previous[j] + 1;
  return after;
}

}  // namespace

RingBlocks even_blocks(std::size_t elements, int parts) {
  RingBlocks blocks;
  const std::size_t base = elements / parts, extra = elements % parts;
  std::size_t offset = 0;
  for (int b = 0; b < parts; ++b) {
    const std::size_t count = base + (static_cast<std::size_t>(b) < extra ? 1 : 0);
    blocks.offset.push_back(offset);
    blocks.count.push_back(count);
    offset += count;
  }
  return blocks;
}

RingBlocks equal_blocks(std::size_t each, int parts) {
  RingBlocks blocks;
  for (int b = 0; b < parts; ++b) {
    blocks.offset.push_back(each * b);
    blocks.count.push_back(each);
  }
  return blocks;
}

namespace {

// Both reduce-scatters. `narrow` (in `narrow_dtype`, or null) is where step 0's sends come from.
TransferPlan reduce_scatter_plan(char* data, const char* narrow, c10::ScalarType narrow_dtype,
                                 const RingBlocks& blocks, c10::ScalarType dtype, double scale,
                                 const RingShape& ring, const tcp_protocol::CallHeader& header,
                                 WithHeader with_header) {
  check_shape(blocks, ring);
  TransferPlan plan;
  plan.dtype = dtype;
  plan.header = header;
  const int r = ring.rank, w = ring.world;
  if (w == 1) return plan;
  if (with_header == WithHeader::kYes) plan.add_header(true, true);
  const std::size_t element = c10::elementSize(dtype);
  // Chunks are cut by elements of `dtype` on every rank, whatever travels.
  const std::size_t narrow_element = narrow ? c10::elementSize(narrow_dtype) : element;
  std::vector<std::size_t> received;  // receive index of each chunk of the last step's block
  for (int step = 0; step < w - 1; ++step) {
    // Step s sends the partial sum of block r-s-1 (at step 0: this rank's own part of it) and
    // receives the partial sum of block r-s-2, adding this rank's part; the block received in
    // the last step is block r, complete.
    const int send_block = mod(r - step - 1, w), receive_block = mod(r - step - 2, w);
    const bool first = step == 0 && narrow;
    const std::size_t sent_element = first ? narrow_element : element;
    const auto send_chunks = chunks_of(blocks.count[send_block], element, ring.chunk_bytes);
    const auto after = afters(received, send_chunks.size());
    const char* send_base = (first ? narrow : data) + blocks.offset[send_block] * sent_element;
    for (std::size_t j = 0; j < send_chunks.size(); ++j) {
      plan.sends.push_back({send_base + send_chunks[j].first * sent_element,
                            send_chunks[j].second * sent_element, step == 0 ? 0 : after[j]});
    }
    received.clear();
    char* receive_base = data + blocks.offset[receive_block] * element;
    for (const auto& [start, length] :
         chunks_of(blocks.count[receive_block], element, ring.chunk_bytes)) {
      Receive add;
      add.bytes = length * sent_element;
      add.action = OnReceive::kReduce;
      if (first) add.arrives_as = narrow_dtype;
      add.out = receive_base + start * element;
      add.local = add.out;
      add.scale = step == w - 2 ? scale : 1.0;
      received.push_back(plan.receives.size());
      plan.receives.push_back(add);
    }
  }
  return plan;
}

}  // namespace

TransferPlan ring_reduce_scatter(char* data, const RingBlocks& blocks, c10::ScalarType dtype,
                                 double scale, const RingShape& ring,
                                 const tcp_protocol::CallHeader& header, WithHeader with_header) {
  return reduce_scatter_plan(data, nullptr, dtype, blocks, dtype, scale, ring, header, with_header);
}

TransferPlan ring_reduce_scatter_widened(char* data, const char* narrow,
                                         c10::ScalarType narrow_dtype, const RingBlocks& blocks,
                                         double scale, const RingShape& ring,
                                         const tcp_protocol::CallHeader& header,
                                         WithHeader with_header) {
  return reduce_scatter_plan(data, narrow, narrow_dtype, blocks, c10::ScalarType::Float, scale,
                             ring, header, with_header);
}

TransferPlan ring_allgather(char* data, const char* own, const RingBlocks& blocks,
                            std::size_t element_size, const RingShape& ring,
                            const tcp_protocol::CallHeader& header, WithHeader with_header) {
  check_shape(blocks, ring);
  TransferPlan plan;
  plan.header = header;
  const int r = ring.rank, w = ring.world;
  if (w == 1) return plan;
  if (with_header == WithHeader::kYes) plan.add_header(true, true);
  std::vector<std::size_t> received;
  for (int step = 0; step < w - 1; ++step) {
    // Step s sends block r-s (this rank's own at step 0, then the one received last) and
    // receives block r-s-1.
    const int send_block = mod(r - step, w), receive_block = mod(r - step - 1, w);
    const auto send_chunks = chunks_of(blocks.count[send_block], element_size, ring.chunk_bytes);
    const auto after = afters(received, send_chunks.size());
    const char* send_base =
        step == 0 && own ? own : data + blocks.offset[send_block] * element_size;
    for (std::size_t j = 0; j < send_chunks.size(); ++j) {
      plan.sends.push_back({send_base + send_chunks[j].first * element_size,
                            send_chunks[j].second * element_size, step == 0 ? 0 : after[j]});
    }
    received.clear();
    char* receive_base = data + blocks.offset[receive_block] * element_size;
    for (const auto& [first, length] :
         chunks_of(blocks.count[receive_block], element_size, ring.chunk_bytes)) {
      Receive keep;
      keep.data = receive_base + first * element_size;
      keep.bytes = length * element_size;
      received.push_back(plan.receives.size());
      plan.receives.push_back(keep);
    }
  }
  return plan;
}

TransferPlan ring_broadcast(char* data, std::size_t bytes, int root, const RingShape& ring,
                            const tcp_protocol::CallHeader& header) {
  TransferPlan plan;
  plan.header = header;
  const int w = ring.world;
  if (w == 1) return plan;
  // Position along the chain: the root is 0, the last rank (root - 1) receives and stops there.
  const int position = mod(ring.rank - root, w);
  const bool receives = position > 0, sends = position < w - 1;
  plan.add_header(sends, receives);
  const auto chunks = chunks_of(bytes, 1, ring.chunk_bytes);
  for (const auto& [first, length] : chunks) {
    if (receives) {
      Receive keep;
      keep.data = data + first;
      keep.bytes = length;
      plan.receives.push_back(keep);
    }
    // Forward each chunk once it is here (receive index: the header, then the chunks).
    if (sends) plan.sends.push_back({data + first, length, receives ? plan.receives.size() : 0});
  }
  return plan;
}

}  // namespace loom::comm
