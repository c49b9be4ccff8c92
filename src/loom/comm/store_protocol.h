// The wire format between Loom's rendezvous store server and its clients. A message is an
// operation (or, in a reply, a status) byte and a list of fields, each a 32-bit little-endian
// length and that many bytes. Replies to get and wait come when the keys exist; the client
// bounds that wait with its timeout.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace loom::comm::store_protocol {

enum Op : std::uint8_t { kSet = 1, kGet, kAdd, kCheck, kDelete, kNumKeys, kWait, kCompareSet };
enum Status : std::uint8_t { kOk = 0, kFailed = 1 };

struct Message {
  std::uint8_t code = 0;  // an Op in requests, a Status in replies
  std::vector<std::string> fields;
};

std::string encode(const Message& message);
// Takes one whole message off the front of `buffer`; nullopt while it is incomplete. Throws
// CommError when the bytes cannot be a message.
std::optional<Message> decode(std::string& buffer);

std::string encode_int(std::int64_t value);
std::int64_t decode_int(const std::string& field);

}  // namespace loom::comm::store_protocol
