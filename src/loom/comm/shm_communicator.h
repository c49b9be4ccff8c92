// Loom's shared-memory backend for ranks of one host. Every rank stages its data in a segment
// all of them map, then reads the peers' data straight from it: one copy in, one copy out, no
// sockets and no kernel on the data path.
//
// Algorithms (per chunk of at most LOOM_SHM_CHUNK_BYTES):
// - small all-reduce (<= LOOM_SHM_SMALL_BYTES): each rank copies in, then reduces every rank's
//   chunk into its own output;
// - large all-reduce: each rank reduces one slice of the chunk across ranks (reduce-scatter),
//   then copies the other ranks' reduced slices (all-gather), so the adds are shared out;
// - every rank reduces in rank order, so all replicas get identical bits.
// Each rank has two staging halves used on alternate steps: a rank may refill a half once its
// peers have released the step that last used it, so consecutive collectives need no closing
// barrier. Waits spin briefly, then sleep on a futex; they end with an error naming the rank
// that did not arrive when the timeout expires, when that rank's process has exited, or when it
// gave up with an error of its own.
//
// Point to point: every ordered pair of ranks has a mailbox; a message goes through it in
// pieces of at most LOOM_SHM_MAILBOX_BYTES, each copied in by the sender and out by the receiver.
//
// Threading: collectives run in call order on one communication thread; sends to and receives
// from each peer on threads of their own (made on first use), so a ring of large sends and
// receives cannot deadlock. A send that fits into a free mailbox while its peer's lane is idle
// is copied in on the caller's thread instead: it cannot block, and waking a lane's thread
// costs more than the copy of a small message.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "loom/comm/communicator.h"
#include "loom/comm/rendezvous.h"
#include "loom/comm/serial_executor.h"
#include "loom/comm/shm_segment.h"

namespace loom::comm {

class ShmCommunicator : public Communicator {
 public:
  // A group of the job ranks `ranks` (all on this host; all ranks when empty). `name` keeps the
  // segments of several groups of one job apart.
  ShmCommunicator(std::shared_ptr<Rendezvous> rendezvous, CommOptions options,
                  std::vector<int> ranks = {}, const std::string& name = "world");
  ~ShmCommunicator() override;

  int rank() const override { return rank_; }
  int world() const override { return world_; }
  std::string backend() const override { return "shm"; }

  WorkPtr allreduce(at::Tensor tensor, ReduceOp op) override;
  WorkPtr broadcast(at::Tensor tensor, int root) override;
  WorkPtr allgather(at::Tensor input, at::Tensor output) override;
  WorkPtr reduce_scatter(at::Tensor input, at::Tensor output, ReduceOp op) override;
  WorkPtr send(at::Tensor tensor, int peer) override;
  WorkPtr recv(at::Tensor tensor, int peer) override;
  WorkPtr barrier() override;

 private:
  enum Kind : std::int32_t {
    kAllreduce = 1,
    kBroadcast,
    kAllgather,
    kReduceScatter,
    kSend,
    kBarrier
  };

  // `body` under the communicator's failure rule: the first failure breaks the communicator
  // for every later call, and the peers are told of it.
  std::function<void()> guarded(const std::string& what, std::function<void()> body);
  // Runs guarded(`body`) on `lane`.
  WorkPtr enqueue(SerialExecutor& lane, std::string what, std::function<void()> body);
  SerialExecutor& lane(std::map<int, std::unique_ptr<SerialExecutor>>& lanes, int peer);
  void throw_if_broken();

  // The step protocol shared by the collectives. stage() waits until this rank's staging half
  // for the next step is free, fills it, publishes it and waits until every rank has; the
  // caller then reads the peers' halves and calls release().
  std::uint32_t stage(const ShmCall& call, const std::function<void(char*)>& fill);
  std::uint32_t begin_step();
  void arrive(std::uint32_t step, const ShmCall& call);
  void await_peers(ShmFlag ShmRankSlot::*flag, std::uint32_t step, const char* phase);
  void check_calls_match(std::uint32_t step, const ShmCall& mine);
  void release(std::uint32_t step);
  char* staging(int rank, std::uint32_t step) { return segment_->staging(rank, step & 1); }

  void run_allreduce(const at::Tensor& tensor, ReduceOp op, const ShmCall& call);
  void run_broadcast(const at::Tensor& tensor, const ShmCall& call);
  void run_allgather(const at::Tensor& input, const at::Tensor& output, const ShmCall& call);
  void run_reduce_scatter(const at::Tensor& input, const at::Tensor& output, ReduceOp op,
                          const ShmCall& call);
  void run_barrier(const ShmCall& call);
  void run_send(const at::Tensor& tensor, int peer, const ShmCall& call);
  void run_recv(const at::Tensor& tensor, int peer, const ShmCall& call);

  // Waits until flag >= target; `peer` and `phase` name what was waited for in errors.
  void await(ShmFlag& flag, std::uint32_t target, int peer, const char* phase);
  ShmCall make_call(Kind kind, std::uint64_t sequence, const at::Tensor& tensor, int root);
  [[noreturn]] void fail_mismatch(const ShmCall& mine, const ShmCall& theirs, int peer);

  std::shared_ptr<Rendezvous> rendezvous_;
  std::vector<int> ranks_;  // group rank -> job rank
  int rank_ = 0;
  int world_ = 1;
  std::size_t chunk_bytes_;
  std::size_t small_bytes_;
  std::size_t mailbox_bytes_;
  std::chrono::microseconds spin_;  // busy-wait this long before sleeping
  std::unique_ptr<ShmSegment> segment_;

  std::uint32_t step_ = 0;  // only the collectives' thread touches it
  // Message parts exchanged per peer; only whoever runs that peer's send (receive) lane touches
  // each: its thread, or a caller the lane let run a send at once (run_now_if_idle).
  std::vector<std::uint32_t> sent_to_, received_from_;

  // Calls made, counted on the caller's thread: collectives, and messages per peer.
  std::uint64_t sequence_ = 0;
  std::vector<std::uint64_t> send_calls_, recv_calls_;
  std::mutex mutex_;
  std::string broken_;  // the first failure; later calls fail at once
  // Declared last: destroyed (drained and joined) before the segment and the state above.
  std::map<int, std::unique_ptr<SerialExecutor>> send_lanes_, recv_lanes_;
  std::unique_ptr<SerialExecutor> collectives_;
};

}  // namespace loom::comm
