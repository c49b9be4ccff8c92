// The connecting end of the TCP backend's handshake (tcp_peer_protocol.h): connect to a peer's
// listener, answer its challenge with proof of the group's secret, and check that the peer holds
// it too before anything else is sent.
#pragma once

#include <string>

#include "loom/comm/tcp_peer_protocol.h"
#include "loom/comm/tcp_socket.h"

namespace loom::comm {

struct PeerGreeting {
  std::string secret;  // the group's
  std::string group;   // the group's name as the handshake carries it
  int from = 0;        // this rank in the group
  int to = 0;          // the peer's rank in the group
  tcp_protocol::Channel channel = tcp_protocol::Channel::kRing;
};

// Connects to `address` ("host:port") and runs the handshake, all before `deadline`. `peer`
// names the other end in errors ("rank 3 (host 1 at 10.0.0.4:40000)"). Throws TimeoutError when
// the deadline passes first, CommError when the peer refuses or fails to prove the secret.
Socket connect_to_peer(const std::string& address, const PeerGreeting& greeting,
                       const std::string& peer, SteadyTime deadline);

}  // namespace loom::comm
