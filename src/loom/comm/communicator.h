// The one interface through which ranks exchange tensors. Backends: "tcp" (Loom's collectives
// over TCP, any hosts), "shm" (Loom's shared-memory collectives, ranks of one host) and "auto"
// (shm inside each host, tcp between hosts).
//
// Ordering contract: every rank of the group calls the collectives in the same order with
// tensors of the same element count and type. Operations run in call order; each returns a
// Work that finishes when this rank's part is done. send/recv pair up in call order per peer.
// A backend that sees the contract broken reports it (shm always checks sizes and types; the
// `check_calls` option adds a cross-rank check of every call to any backend) instead of hanging.
//
// Tensors are CPU, contiguous, and must stay alive and untouched until their Work finishes.
// Calls are made from one thread at a time.
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <string>
#include <vector>

#include "loom/comm/work.h"

namespace loom::comm {

enum class ReduceOp { kSum, kAvg };

struct CommOptions {
  // Longest wait for any peer in any operation; the error names who did not arrive.
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
  // Debug: before every call, compare its sequence number, kind, shape and type across ranks
  // and report the first mismatch (costs one small exchange per call).
  bool check_calls = false;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int world() const = 0;
  // "tcp", "shm" or "auto(shm x N hosts + tcp)".
  virtual std::string backend() const = 0;

  // In place: every rank ends with the element-wise sum (or mean) of all ranks' tensors.
  virtual WorkPtr allreduce(at::Tensor tensor, ReduceOp op) = 0;
  // In place: every rank ends with root's tensor.
  virtual WorkPtr broadcast(at::Tensor tensor, int root) = 0;
  // output (world x input.numel() elements) receives every rank's input in rank order.
  virtual WorkPtr allgather(at::Tensor input, at::Tensor output) = 0;
  // input holds world equal blocks; output receives the reduction of block `rank` of every rank.
  virtual WorkPtr reduce_scatter(at::Tensor input, at::Tensor output, ReduceOp op) = 0;
  virtual WorkPtr send(at::Tensor tensor, int peer) = 0;
  virtual WorkPtr recv(at::Tensor tensor, int peer) = 0;
  virtual WorkPtr barrier() = 0;

  // Before send/recv with `peers` (this group's ranks): a backend whose sends block for their
  // receiver on the device (NCCL's) opens one channel per direction for each peer here, so that
  // messages one way never queue behind messages the other way. Every rank calls it at the same
  // point with the peers it will exchange messages with (if a names b, b names a); it returns
  // when its channels are connected, or throws naming the peer. Backends that buffer their sends
  // (every host backend) have nothing to do.
  virtual void prepare_peers(const std::vector<int>& peers) {}

  const CommOptions& options() const { return options_; }

 protected:
  explicit Communicator(CommOptions options) : options_(options) {}

 private:
  CommOptions options_;
};

// Checks shared by all backends; throw CommError naming the operation and the rank.
void check_tensor(const at::Tensor& tensor, const char* operation, int rank, int world);
void check_peer(int peer, const char* operation, int rank, int world);
// "allreduce #12 (4096 x float)": how operations are named in errors and traces.
std::string describe_call(const char* operation, std::uint64_t sequence, const at::Tensor& tensor);

}  // namespace loom::comm
