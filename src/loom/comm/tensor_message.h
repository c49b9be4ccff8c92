// Point-to-point tensors whose shape and type the receiver does not know beforehand: each goes
// as a small header (element type, dimensions, sizes, the sender's label and note, where the
// bytes travel) and then its bytes. Named tensors (a rank's share of a checkpoint) go as a count
// and then a name and a tensor each.
//
// The header always crosses host memory (the communicator's CPU backend). The bytes of a device's
// tensor do too unless the sender asks for Bytes::kOnTheirDevice: then they go over the
// communicator's backend for that device (NCCL: GPU to GPU, on its stream), and neither the
// sender nor the receiver waits for its GPU. The sender's host sends the header as soon as the
// tensor's shape is known (its values may still be computing), the receiver's host allocates on
// its device and posts the receive, and its stream waits for the bytes.
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

// What the receiver learns before the bytes: the label, and a number the sender attaches (-1:
// none), such as how many of a micro-batch's targets count in its loss, counted on the sender's
// host so that the receiver need not count them on its device.
struct MessageHeader {
  MessageLabel label{};
  int64_t note = -1;
};

// Where a message's bytes travel: through host memory (where the receiver makes a CPU tensor),
// or on the device the tensor is on (where the receiver makes it on its own device).
enum class Bytes { kThroughHost, kOnTheirDevice };

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

// Starts sending `tensor` (of up to 8 dimensions) to `peer`, with `header`'s label and note.
// Through host memory, a device's tensor is copied there first (which waits for the device).
void send_tensor(Communicator& comm, const at::Tensor& tensor, int peer, PendingSends& pending,
                 const MessageHeader& header = {}, Bytes bytes = Bytes::kThroughHost);
// Receives what send_tensor sent from `peer`, waiting up to the Communicator's timeout for each
// part (bytes on a device: the stream waits, not the host). `on_header` (optional) runs between
// them: the sender has produced the tensor, or queued it on its device, and what is left is its
// transfer; it may throw to refuse the message before its bytes are taken. Bytes sent on a device
// land on `device`, which must be of that device's type. Throws CommError for a malformed header
// or a device that cannot take the bytes (problem "device"), naming the peer.
at::Tensor recv_tensor(Communicator& comm, int peer,
                       const std::function<void(const MessageHeader&)>& on_header = nullptr,
                       c10::Device device = c10::kCPU);

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
