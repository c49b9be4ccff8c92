// The wire format between the ranks of Loom's TCP backend (tcp_communicator.h), version 1.
//
// Every connection carries data one way, from the rank that connected to the rank that accepted,
// and opens with a handshake in store_protocol.h's framing (an operation byte, then fields):
//   acceptor  -> connector  kChallenge {"loom-tcp/1", acceptor nonce (32 bytes)}
//   connector -> acceptor   kHello {proof, connector nonce (32 bytes), group, from, to, channel}
//   acceptor  -> connector  kWelcome {acceptor proof}  |  kRefused {reason}, then it closes
// proof = HMAC-SHA256(secret, "loom-tcp hello" + acceptor nonce + group + from + to + channel),
// acceptor proof = HMAC-SHA256(secret, "loom-tcp welcome" + connector nonce). The secret is drawn
// by the group's first rank and shared through the rendezvous store, so only processes the store
// admitted can join; neither the secret nor a reusable answer crosses the wire, and the connector
// learns that it reached a rank of its own group before it sends any data.
//
// After the handshake, every call's bytes on a connection begin with a CallHeader (32 bytes,
// little-endian) that the receiver compares with its own call: a rank that broke the ordering
// contract is reported with both calls instead of pairing up the wrong buffers. The payload that
// follows is raw tensor bytes in an order both sides derive from the (validated) header.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "loom/comm/store_protocol.h"

namespace loom::comm::tcp_protocol {

inline constexpr const char* kVersion = "loom-tcp/1";
inline constexpr std::size_t kNonceBytes = 32;
// Handshake codes; distinct from the store's, so that neither side mistakes the other's server.
enum Code : std::uint8_t { kChallenge = 40, kHello = 41, kWelcome = 42, kRefused = 43 };

// What a connection is for. A ring connection goes to the next rank of the group's ring and
// carries the collectives; a message connection carries one direction of send/recv between two
// ranks.
enum class Channel : std::uint8_t { kRing = 1, kMessages = 2 };
const char* channel_name(Channel channel);

struct Hello {
  std::string proof;
  std::string nonce;  // the connector's, for the acceptor's proof
  std::string group;
  int from = -1;  // group ranks
  int to = -1;
  Channel channel = Channel::kRing;
};

store_protocol::Message encode_hello(const Hello& hello);
// Throws CommError saying what is wrong when `message` is not a well-formed hello from a rank
// of 0..world-1 (it does not check the proof: see hello_proof).
Hello decode_hello(const store_protocol::Message& message, int world);

std::string hello_proof(const std::string& secret, const std::string& acceptor_nonce,
                        const std::string& group, int from, int to, Channel channel);
std::string welcome_proof(const std::string& secret, const std::string& connector_nonce);

// What a call is, as both ends of a connection see it.
enum class CallKind : std::uint32_t {
  kAllreduce = 1,
  kBroadcast,
  kAllgather,
  kReduceScatter,
  kBarrier,
  kMessage,  // send/recv
};
const char* call_kind_name(CallKind kind);

struct CallHeader {
  CallKind kind = CallKind::kAllreduce;
  std::uint64_t sequence = 0;  // collectives: the group's call count; messages: per direction
  std::int32_t dtype = 0;      // c10::ScalarType
  std::int32_t root = 0;       // broadcast's root
  std::int64_t numel = 0;
};

inline constexpr std::size_t kHeaderBytes = 32;
inline constexpr std::uint32_t kHeaderMagic = 0x31504354;  // "TCP1"

// Writes the header's kHeaderBytes bytes.
void encode_header(const CallHeader& header, char* out);
// The header in kHeaderBytes bytes; nullopt when they do not start with kHeaderMagic (not a
// header: the stream is out of step, or not from Loom).
std::optional<CallHeader> decode_header(const char* bytes);

// "allreduce #3 (1024 x Float)"; a dtype that is no ScalarType is shown as its number.
std::string describe_header(const CallHeader& header);
// True when both describe the same call.
bool same_call(const CallHeader& a, const CallHeader& b);

}  // namespace loom::comm::tcp_protocol
