// Loom's TCP backend, for ranks on any hosts (between hosts, beside the shm backend inside one).
//
// Connections. Each rank listens on one address (LOOM_COMM_HOST; by default 127.0.0.1 when the
// group shares a host, else the local address of this host's route to the rendezvous store, an
// address the peers can reach), and the ranks learn each other's "address:port" through the
// store. Every connection carries data one way and opens with a handshake that proves both ends
// hold the group's secret (drawn by its first rank, shared through the store; see
// tcp_peer_protocol.h); a listener refuses anyone else. Each rank connects to the next rank of
// the group's ring when the communicator is built, and, on its first send to a peer, to that
// peer; it accepts the previous rank's ring connection and its peers' message connections.
//
// Algorithms: ring reduce-scatter, all-gather and all-reduce (reduce-scatter + all-gather, or
// for up to LOOM_TCP_SMALL_BYTES an all-gather and a local sum), and a chain broadcast, all in
// chunks of LOOM_TCP_CHUNK_BYTES, pipelined, sending and receiving at once (tcp_ring_plans.h,
// tcp_transfer.h). Reductions use reduce_kernels.h; bfloat16 and float16 partial sums travel as
// float (each rank's own parts in 16 bits), so a sum is rounded once, as over shared memory. Every
// call's first bytes on a connection are its header, which the receiver compares with its own call:
// calls out of step are reported with both calls rather than pairing up the wrong buffers.
//
// Failures: every wait ends after options.timeout without progress, with TimeoutError naming the
// operation, this rank and the peer waited for; a connection that closes ends the call with
// CommError naming the peer (and, when the peer failed first, its error). The first failure
// breaks the communicator: it posts its error to the store, closes its connections so that the
// peers fail at once instead of at their timeout, and every later call fails with it.
//
// Threading: collectives run in call order on one thread; sends to and receives from each peer
// on lanes of their own (made on first use), so a ring of large sends and receives cannot
// deadlock. A caller that waits for an operation nobody has started runs it itself
// (serial_executor.h), and a small send whose connection has taken everything before it is
// written on the caller's thread when its lane is idle (it cannot block).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "loom/comm/communicator.h"
#include "loom/comm/rendezvous.h"
#include "loom/comm/serial_executor.h"
#include "loom/comm/tcp_peer_listener.h"
#include "loom/comm/tcp_transfer.h"

namespace loom::comm {

class TcpCommunicator : public Communicator {
 public:
  // A group of `ranks` (all ranks of the job when empty); `name` keeps the store keys of several
  // groups apart. Only the members construct it, each with the same list and name. Throws
  // CommError or TimeoutError naming the peer it could not connect to.
  TcpCommunicator(std::shared_ptr<Rendezvous> rendezvous, CommOptions options,
                  std::vector<int> ranks = {}, const std::string& name = "world");
  ~TcpCommunicator() override;

  int rank() const override { return rank_; }
  int world() const override { return world_; }
  std::string backend() const override { return "tcp"; }

  WorkPtr allreduce(at::Tensor tensor, ReduceOp op) override;
  WorkPtr broadcast(at::Tensor tensor, int root) override;
  WorkPtr allgather(at::Tensor input, at::Tensor output) override;
  WorkPtr reduce_scatter(at::Tensor input, at::Tensor output, ReduceOp op) override;
  WorkPtr send(at::Tensor tensor, int peer) override;
  WorkPtr recv(at::Tensor tensor, int peer) override;
  WorkPtr barrier() override;

  // "address:port" this rank listens on, and the connections it refused so far (tests).
  const std::string& address() const { return listener_->address(); }
  int refused_connections() const { return listener_->refused(); }

 private:
  // `body` under the failure rule (see the class comment).
  std::function<void()> guarded(const std::string& what, std::function<void()> body);
  WorkPtr enqueue(SerialExecutor& lane, std::string what, std::function<void()> body);
  SerialExecutor& lane(std::map<int, std::unique_ptr<SerialExecutor>>& lanes, int peer);
  void throw_if_broken(const std::string& what);
  void break_connections(const std::string& error);
  // Keeps `socket` for the failure rule's closing; returns its descriptor.
  int keep(Socket socket);

  // "rank 3 (host 1 at 10.0.0.4:40000)" for group rank `peer`.
  std::string describe_peer(int peer) const;
  TransferContext context(const std::string& operation) const;
  // Why group rank `peer` closed its connections, from what it posted (": it gave up: ...").
  std::string explain_loss(int job_rank) const;
  tcp_protocol::CallHeader header(tcp_protocol::CallKind kind, std::uint64_t sequence,
                                  const at::Tensor& tensor, int root) const;
  int connect_to(int peer, tcp_protocol::Channel channel);
  void run_ring(const TransferPlan& plan, const std::string& operation);
  // Room for `bytes` of gathered data (small all-reduces, barriers), and for a copy the ring
  // works on (reduce_scatter's input, 16-bit floats widened), each kept between calls.
  char* gather_space(std::size_t bytes);
  char* work_space(std::size_t bytes);

  void run_allreduce(const at::Tensor& tensor, ReduceOp op, const tcp_protocol::CallHeader& call,
                     const std::string& what);
  void run_reduce_scatter(const at::Tensor& input, const at::Tensor& output, ReduceOp op,
                          const tcp_protocol::CallHeader& call, const std::string& what);
  void run_send(const at::Tensor& tensor, int peer, const tcp_protocol::CallHeader& call,
                const std::string& what);
  void run_recv(const at::Tensor& tensor, int peer, const tcp_protocol::CallHeader& call,
                const std::string& what);

  std::shared_ptr<Rendezvous> rendezvous_;
  std::vector<int> ranks_;  // group rank -> job rank
  int rank_ = 0;
  int world_ = 1;
  std::string group_;   // name/generation: the store's key space and the handshake's group
  std::string secret_;  // the group's, drawn by its first rank
  std::vector<std::string> addresses_;  // every group rank's listener
  std::size_t chunk_bytes_;
  std::size_t small_bytes_;
  std::unique_ptr<TcpPeerListener> listener_;

  // Only the collectives' lane touches these.
  TransferEnds ring_;
  std::vector<char> gather_space_;
  std::vector<char> work_space_;
  std::vector<char> reduce_space_;  // where received chunks land before they are added
  // Only each peer's send (receive) lane touches its descriptor: -1 until connected.
  std::vector<int> message_out_, message_in_;

  // Calls made, counted on the caller's thread: collectives, and messages per peer.
  std::uint64_t sequence_ = 0;
  std::vector<std::uint64_t> send_calls_, recv_calls_;

  mutable std::mutex mutex_;
  std::string broken_;           // the first failure; later calls fail at once
  std::vector<Socket> sockets_;  // every connection, to close on failure and at the end
  // Declared last: destroyed (drained and joined) before everything above.
  std::map<int, std::unique_ptr<SerialExecutor>> send_lanes_, recv_lanes_;
  std::unique_ptr<SerialExecutor> collectives_;
};

}  // namespace loom::comm
