// The listening end of one rank of a TCP group: a socket bound to one address (never to every
// interface) and a thread that accepts the group's connections, runs the acceptor's half of the
// handshake of tcp_peer_protocol.h with each, and files the authenticated ones by channel and
// peer for the communicator to take.
//
// A connection that fails the handshake (wrong proof, another group, a rank that is already
// connected on that channel, malformed bytes, more than a handshake's bytes, or silence for the
// handshake timeout) is refused with the reason, closed and logged with its address; the group
// goes on.
//
// Threading: one thread of its own serves every pending connection with poll(); take() and
// refused() may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "loom/comm/tcp_peer_protocol.h"
#include "loom/comm/tcp_socket.h"

namespace loom::comm {

class TcpPeerListener {
 public:
  struct Identity {
    std::string secret;  // the group's, for the handshake's proofs
    std::string group;   // the group's name as the handshake carries it
    int rank = 0;        // this rank in the group
    int world = 1;
  };

  // Binds `host` at a free port. Accepts nothing until start(). Throws CommError naming the
  // address when it cannot bind.
  TcpPeerListener(const std::string& host, std::chrono::milliseconds handshake_timeout);
  ~TcpPeerListener();
  TcpPeerListener(const TcpPeerListener&) = delete;
  TcpPeerListener& operator=(const TcpPeerListener&) = delete;

  // "address:port", numeric: what the peers connect to.
  const std::string& address() const { return address_; }

  // Starts accepting. Connections that arrived before wait in the listen queue.
  void start(Identity identity);

  // The connection `peer` opened for `channel`, once it has authenticated; waits for it until
  // `deadline` and returns an invalid Socket if it has not come by then (or stop() was called).
  Socket take(tcp_protocol::Channel channel, int peer, SteadyTime deadline);

  // Wakes every take() (they return invalid sockets) and refuses what comes later: for a
  // communicator that has failed.
  void stop();

  // Connections refused so far.
  int refused() const { return refused_.load(); }

 private:
  struct Pending {
    Socket socket;
    std::string address;  // the peer's, for the log
    std::string nonce;    // the challenge sent
    std::string input;
    SteadyTime since;
  };
  using Slot = std::pair<tcp_protocol::Channel, int>;

  void serve();
  void accept_one();
  // False when the connection is finished with (filed or refused).
  bool read_from(Pending& pending);
  void admit(Pending& pending, const store_protocol::Message& message);
  void refuse(Pending& pending, const std::string& why);

  std::chrono::milliseconds handshake_timeout_;
  Socket listener_;
  std::string address_;
  int wake_fds_[2] = {-1, -1};  // a pipe that ends serve()
  Identity identity_;
  std::map<int, Pending> pending_;  // by descriptor; only the thread touches it
  std::atomic<int> refused_{0};

  std::mutex mutex_;
  std::condition_variable arrived_;
  std::map<Slot, Socket> ready_;  // authenticated, not yet taken
  std::map<Slot, bool> claimed_;  // every slot ever filled: a second connection is refused
  bool stopped_ = false;
  std::thread thread_;
};

}  // namespace loom::comm
