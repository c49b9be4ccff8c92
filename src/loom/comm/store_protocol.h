// The wire format between Loom's rendezvous store server and its clients. A message is an
// operation (or, in a reply, a status) byte and a list of fields, each a 32-bit little-endian
// length and that many bytes. Replies to get and wait come when the keys exist; the client
// bounds that wait with its timeout.
//
// Every connection opens with a handshake (version 1):
//   server -> client:  kChallenge {"loom-store/1", server nonce (32 bytes),
//                                  "1" | "0" (token required)}
//   client -> server:  kAuth {client proof, client nonce (32 bytes)}
//   server -> client:  kOk {server proof}
//                      | kFailed {reason, problem}, then the server closes; `problem` (wrong_token,
//                        no_token, handshake_timeout, ...) names the refusal for programs, and a
//                        client that reads only the reason still works
// client proof = HMAC-SHA256(token, "loom-store client" + server nonce), server proof the same
// with "loom-store server" + client nonce; empty proofs when the store has no token. Neither the
// token nor a reusable answer crosses the wire, and a client learns that the store it reached
// holds the same token before it tells that store anything.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace loom::comm::store_protocol {

enum Op : std::uint8_t {
  kSet = 1,
  kGet,
  kAdd,
  kCheck,
  kDelete,
  kNumKeys,
  kWait,
  kCompareSet,
  kAuth,
};
enum Status : std::uint8_t { kOk = 0, kFailed = 1, kChallenge = 2 };

inline constexpr const char* kVersion = "loom-store/1";
inline constexpr std::size_t kNonceBytes = 32;
// The largest message a server takes before a client has authenticated, and after.
inline constexpr std::size_t kMaxHandshakeBytes = 1024;
inline constexpr std::size_t kMaxMessageBytes = 64u << 20;

struct Message {
  std::uint8_t code = 0;  // an Op in requests, a Status in replies
  std::vector<std::string> fields;
};

std::string encode(const Message& message);
// Takes one whole message off the front of `buffer`; nullopt while it is incomplete. Throws
// CommError when the bytes cannot be a message, or announce one longer than `max_bytes`.
std::optional<Message> decode(std::string& buffer, std::size_t max_bytes = kMaxMessageBytes);

std::string encode_int(std::int64_t value);
std::int64_t decode_int(const std::string& field);

// The proofs of the handshake. `token` empty: no token, an empty proof.
std::string client_proof(const std::string& token, const std::string& server_nonce);
std::string server_proof(const std::string& token, const std::string& client_nonce);

}  // namespace loom::comm::store_protocol
