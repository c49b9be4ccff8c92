// Point-to-point tensors whose shape and type the receiver does not know beforehand: each goes
// as a small header (element type, dimensions, sizes, the sender's label) and then its bytes.
// Named tensors (a rank's share of a checkpoint) go as a count and then a name and a tensor each.
//
// The Communicator's rule holds: sends and receives pair up in call order per peer, so both
// sides must agree on how many messages pass between them, not on their shapes. A tensor with
// no elements sends its header only.
//
// Threading: like the Communicator, one thread at a time.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "loom/comm/communicator.h"

namespace loom::comm {

using NamedTensorList = std::vector<std::pair<std::string, at::Tensor>>;

// What a message says it is, so that its receiver can check that what arrived is what it waited
// for (a pipeline stage: stage, micro-batch, kind, step). It rides in the header, which goes
// anyway, so it costs no extra message; zeros when the sender gives none.
using MessageLabel = std::array<int64_t, 4>;

// Sends in flight and the tensors they read, which must outlive them.
class PendingSends {
 public:
  void add(WorkPtr work, at::Tensor keep) { sends_.emplace_back(std::move(work), std::move(keep)); }
  // Waits for every send (the Communicator's timeout each) and forgets them.
  void wait_all(std::chrono::milliseconds timeout);
  bool empty() const { return sends_.empty(); }

 private:
  std::vector<std::pair<WorkPtr, at::Tensor>> sends_;
};

// Starts sending `tensor` (of up to 8 dimensions) to `peer`, labelled `label`. A message travels
// in host memory: a device's tensor is copied there first, and recv_tensor makes a CPU tensor.
void send_tensor(Communicator& comm, const at::Tensor& tensor, int peer, PendingSends& pending,
                 const MessageLabel& label = {});
// Receives what send_tensor sent from `peer`, waiting up to the Communicator's timeout for each
// part. `on_header` (optional) runs between them, with the sender's label: the sender has
// produced the tensor and what is left is its transfer; it may throw to refuse the message
// before its bytes are taken. Throws CommError for a malformed header, naming the peer.
at::Tensor recv_tensor(Communicator& comm, int peer,
                       const std::function<void(const MessageLabel&)>& on_header = nullptr);

// `count` tensors a peer sent in a row (send_tensor), as the receiver takes them in order:
// taking the i-th takes in (and drops) any before it that the receiver skips; drain() takes in
// the rest, so that the peer's sends complete.
class PeerTensors {
 public:
  PeerTensors(Communicator& comm, int peer, size_t count)
      : comm_(&comm), peer_(peer), count_(count) {}
  at::Tensor take(size_t index) {
    while (next_ < index) skip();
    ++next_;
    return recv_tensor(*comm_, peer_);
  }
  void drain() {
    while (next_ < count_) skip();
  }
  // Tensors taken in (or dropped) so far.
  size_t taken() const { return next_; }

 private:
  void skip() {
    recv_tensor(*comm_, peer_);
    ++next_;
  }
  Communicator* comm_;
  int peer_;
  size_t count_, next_ = 0;
};

void send_named_tensors(Communicator& comm, const NamedTensorList& tensors, int peer,
                        PendingSends& pending);
NamedTensorList recv_named_tensors(Communicator& comm, int peer);

}  // namespace loom::comm
