// The TCP backend's algorithms, as functions that build TransferPlans for one rank of a ring
// (each rank sends to rank + 1 and receives from rank - 1, modulo the group's size).
//
// - Reduce-scatter (ring): in world - 1 steps every rank forwards a partial sum of one block to
//   the next rank, which adds its own part; after the last step rank r holds block r, summed
//   over all ranks. Each rank sends (world - 1) / world of the data: bandwidth-optimal.
// - All-gather (ring): in world - 1 steps each rank forwards the block it received last.
// - All-reduce = reduce-scatter + all-gather (large), or all-gather of whole tensors and a local
//   sum in rank order (small: world - 1 steps instead of 2 (world - 1), latency-bound sizes).
// - Broadcast: a chain from the root around the ring.
// Blocks are cut into chunks of at most `chunk_bytes`; a rank forwards a chunk as soon as it has
// it (and has added its part), so the steps overlap (pipelining). Every rank of a ring builds its
// plan from the same (validated) call, so the chunks a rank sends are exactly those its next
// rank expects. The first segment each way is the call's header, when the plan carries one.
#pragma once

#include <cstddef>
#include <vector>

#include "loom/comm/tcp_transfer.h"

namespace loom::comm {

// A tensor cut into one block per rank: block b covers elements [offset[b], offset[b] + count[b]).
struct RingBlocks {
  std::vector<std::size_t> offset, count;
};
// `elements` in `parts` blocks as even as can be (the first elements % parts one longer).
RingBlocks even_blocks(std::size_t elements, int parts);
// `parts` blocks of exactly `each` elements.
RingBlocks equal_blocks(std::size_t each, int parts);

struct RingShape {
  int rank = 0;
  int world = 1;
  std::size_t chunk_bytes = 512 << 10;
};

// Whether the plan's first segments are the call's header (both ways where the plan sends and
// receives at all).
enum class WithHeader : bool { kNo = false, kYes = true };

// In place over `data` (blocks of elements of `dtype`): afterwards block `rank` holds
// scale * the sum of every rank's block `rank`; the other blocks hold partial sums.
TransferPlan ring_reduce_scatter(char* data, const RingBlocks& blocks, c10::ScalarType dtype,
                                 double scale, const RingShape& ring,
                                 const tcp_protocol::CallHeader& header, WithHeader with_header);

// The same for 16-bit floats summed in float: `data` holds the float copy of `narrow` (the
// tensor, in `narrow_dtype`). The first step sends this rank's own parts as they are in `narrow`,
// which the next rank widens as it adds (a part, unlike a partial sum, loses nothing in 16 bits);
// later steps send float partial sums. On two ranks every byte on the wire is 16-bit.
TransferPlan ring_reduce_scatter_widened(char* data, const char* narrow,
                                         c10::ScalarType narrow_dtype, const RingBlocks& blocks,
                                         double scale, const RingShape& ring,
                                         const tcp_protocol::CallHeader& header,
                                         WithHeader with_header);

// In place over `data`: block `rank` is sent (from `own` when given, else from data), every other
// block received.
TransferPlan ring_allgather(char* data, const char* own, const RingBlocks& blocks,
                            std::size_t element_size, const RingShape& ring,
                            const tcp_protocol::CallHeader& header, WithHeader with_header);

// `bytes` at `data` go from `root` along the ring to every rank.
TransferPlan ring_broadcast(char* data, std::size_t bytes, int root, const RingShape& ring,
                            const tcp_protocol::CallHeader& header);

}  // namespace loom::comm
