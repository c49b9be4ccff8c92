// One call's traffic over TCP as data, and the loop that carries it out.
//
// A TransferPlan lists the segments a rank sends on one connection and receives on another, in
// stream order, and what becomes of each received segment: kept where it landed, compared with
// this rank's call header, or reduced into a tensor (out = scale * (received + local)). A send may
// wait for some receives: "after 3" goes once the first three received segments are done, which
// is how a ring forwards a chunk as soon as it has added its own part, while the next chunk is
// still arriving. The ring algorithms (tcp_ring_plans.h) are functions that build such plans.
//
// run_transfer moves both directions at once over non-blocking sockets and poll(), so that two
// ranks exchanging with each other use both directions of the link, and reduces each chunk as it
// completes. It ends with an error naming the peer when a connection closes, when a peer's
// header shows another call, or when no byte has moved for the timeout.
#pragma once

#include <c10/core/ScalarType.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "loom/comm/tcp_peer_protocol.h"

namespace loom::comm {

struct TransferPlan {
  struct Send {
    const char* data = nullptr;
    std::size_t bytes = 0;
    std::size_t after = 0;  // received segments that must be done first
  };
  enum class OnReceive : std::uint8_t { kKeep, kCheckHeader, kReduce };
  struct Receive {
    char* data = nullptr;  // kKeep, kCheckHeader: where the bytes land (kReduce: the scratch)
    std::size_t bytes = 0;
    OnReceive action = OnReceive::kKeep;
    // kReduce: out[i] = scale * (received[i] + local[i]) over the segment's elements of the
    // plan's `dtype`; out may be local. The received elements arrive as `arrives_as`: the plan's
    // dtype (Undefined), or a 16-bit float type that is widened to the plan's float first.
    char* out = nullptr;
    const char* local = nullptr;
    double scale = 1.0;
    c10::ScalarType arrives_as = c10::ScalarType::Undefined;

    bool widened(c10::ScalarType plan_dtype) const {
      return arrives_as != c10::ScalarType::Undefined && arrives_as != plan_dtype;
    }
  };

  std::vector<Send> sends;
  std::vector<Receive> receives;
  c10::ScalarType dtype = c10::ScalarType::Float;  // of the reductions
  tcp_protocol::CallHeader header;  // this rank's call, what kCheckHeader compares with
  // The bytes add_header's segments point at (this rank's header, then room for the peer's); on
  // the heap, so that the pointers stay valid when the plan is moved.
  std::shared_ptr<char[]> header_bytes;

  // Makes this rank's header the first segment sent (`send`) and a check of the peer's header
  // the first segment received (`receive`). Call before adding any other segment.
  void add_header(bool send, bool receive);

  // What run_transfer needs as scratch: room for the largest kReduce segment as it arrives, and
  // for the largest one widened (past widened_at()).
  std::size_t scratch_bytes() const;
  std::size_t widened_at() const;
  // A summary for tests and traces: "3 sends (4128 bytes), 2 receives (2 reduce)".
  std::string describe() const;
};

// The two connections of a transfer and who is at their other ends. Either descriptor may be -1
// when the plan does not use that direction.
struct TransferEnds {
  int send_fd = -1;
  int receive_fd = -1;
  std::string send_peer;     // "rank 2 (host 1 at 10.0.0.3:41234)"
  std::string receive_peer;  // the same, for the connection received from
  int send_rank = -1;        // job ranks, for the errors' fields
  int receive_rank = -1;
};

struct TransferContext {
  std::string operation;                      // describe_call(...), for errors
  std::string me;                             // "rank 0 of 4", for errors
  std::chrono::milliseconds timeout{300000};  // longest time without a byte moving
  // Why the peer of job rank `rank` closed its connection (": it gave up: ..."), or "" when
  // nothing is known; asked only on the way to an error.
  std::function<std::string(int rank)> explain_loss;
};

// Carries out `plan`; `scratch` holds at least plan.scratch_bytes() bytes. Throws CommError
// (a connection lost, a call out of step) or TimeoutError (no progress), each naming the peer.
void run_transfer(const TransferPlan& plan, const TransferEnds& ends,
                  const TransferContext& context, char* scratch);

}  // namespace loom::comm
