// The TCP backend's wire format: what anyone who reaches a rank's listener can send it (a
// handshake message, read under the handshake's limit), and the call headers a connected peer
// sends. Hellos that decode must name ranks of the group and re-encode to the same fields; headers
// that decode must re-encode to their bytes and describe themselves, whatever their numbers.
#include <cstring>

#include "fuzz_target.h"
#include "loom/comm/tcp_peer_protocol.h"
#include "loom/core/error.h"

using namespace loom::comm;

LOOM_FUZZ_TARGET(tcp_peer_protocol) {
  constexpr int kWorld = 4;
  std::string buffer(reinterpret_cast<const char*>(data), size);
  try {
    if (auto message = store_protocol::decode(buffer, store_protocol::kMaxHandshakeBytes)) {
      try {
        const auto hello = tcp_protocol::decode_hello(*message, kWorld);
        if (hello.from < 0 || hello.from >= kWorld || hello.to < 0 || hello.to >= kWorld) {
          loom::fuzz::broken("a hello between ranks outside the group was accepted");
        }
        const auto again = tcp_protocol::decode_hello(tcp_protocol::encode_hello(hello), kWorld);
        if (again.proof != hello.proof || again.nonce != hello.nonce ||
            again.group != hello.group || again.from != hello.from || again.to != hello.to ||
            again.channel != hello.channel) {
          loom::fuzz::broken("a hello does not survive encoding");
        }
      } catch (const loom::CommError&) {
        // not a hello: the listener refuses the connection with this reason
      }
    }
  } catch (const loom::CommError&) {
    // malformed framing: refused the same way
  }
  for (std::size_t at = 0; at + tcp_protocol::kHeaderBytes <= size;
       at += tcp_protocol::kHeaderBytes) {
    const char* bytes = reinterpret_cast<const char*>(data) + at;
    const auto header = tcp_protocol::decode_header(bytes);
    if (!header) continue;
    char again[tcp_protocol::kHeaderBytes];
    tcp_protocol::encode_header(*header, again);
    if (std::memcmp(again, bytes, sizeof again) != 0) {
      loom::fuzz::broken("a header does not re-encode to its bytes");
    }
    if (!tcp_protocol::same_call(*header, *header))
      loom::fuzz::broken("a call differs from itself");
    if (tcp_protocol::describe_header(*header).empty()) loom::fuzz::broken("an empty description");
  }
}
