#include "loom/comm/store_protocol.h"

#include <cstring>

#include "loom/core/error.h"
#include "loom/core/keyed_hash.h"

namespace loom::comm::store_protocol {
namespace {

constexpr std::uint32_t kMaxFields = 1u << 16;

void put_u32(std::string& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

std::uint32_t get_u32(const std::string& in, std::size_t at) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i)
    v |= static_cast<std::uint32_t>(static_cast<unsigned char>(in[at + i])) << (8 * i);
  return v;
}

}  // namespace

std::string encode(const Message& message) {
  std::string out(1, static_cast<char>(message.code));
  put_u32(out, static_cast<std::uint32_t>(message.fields.size()));
  for (const auto& field : message.fields) {
    put_u32(out, static_cast<std::uint32_t>(field.size()));
    out += field;
  }
  return out;
}

std::optional<Message> decode(std::string& buffer, std::size_t max_bytes) {
  if (buffer.size() < 5) return std::nullopt;
  const std::uint32_t count = get_u32(buffer, 1);
  // Each field takes at least its 4-byte length, so the count alone can exceed the limit.
  if (count > kMaxFields || 5 + 4 * std::size_t{count} > max_bytes) {
    throw CommError("store: malformed message (" + std::to_string(count) + " fields)",
                    {{"value", std::to_string(count)}, {"problem", "malformed"}});
  }
  std::size_t at = 5;
  Message message;
  message.code = static_cast<std::uint8_t>(buffer[0]);
  for (std::uint32_t i = 0; i < count; ++i) {
    if (buffer.size() < at + 4) return std::nullopt;
    const std::uint32_t length = get_u32(buffer, at);
    if (at + 4 + std::size_t{length} > max_bytes) {
      throw CommError("store: message longer than " + std::to_string(max_bytes) +
                          " bytes (a field of " + std::to_string(length) + ")",
                      {{"value", std::to_string(length)},
                       {"allowed", std::to_string(max_bytes)},
                       {"problem", "too_long"}});
    }
    if (buffer.size() < at + 4 + length) return std::nullopt;
    message.fields.push_back(buffer.substr(at + 4, length));
    at += 4 + length;
  }
  buffer.erase(0, at);
  return message;
}

std::string encode_int(std::int64_t value) {
  std::string out(8, '\0');
  std::memcpy(out.data(), &value, 8);  // little-endian hosts only, like the rest of Loom
  return out;
}

std::int64_t decode_int(const std::string& field) {
  if (field.size() != 8) {
    throw CommError("store: malformed integer field",
                    {{"value", std::to_string(field.size())}, {"problem", "malformed"}});
  }
  std::int64_t value;
  std::memcpy(&value, field.data(), 8);
  return value;
}

std::string client_proof(const std::string& token, const std::string& server_nonce) {
  return token.empty() ? std::string() : hmac_sha256(token, "loom-store client" + server_nonce);
}

std::string server_proof(const std::string& token, const std::string& client_nonce) {
  return token.empty() ? std::string() : hmac_sha256(token, "loom-store server" + client_nonce);
}

}  // namespace loom::comm::store_protocol
