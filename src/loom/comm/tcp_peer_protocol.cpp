#include "loom/comm/tcp_peer_protocol.h"

#include <c10/core/ScalarType.h>

#include <cstring>

#include "loom/core/error.h"
#include "loom/core/keyed_hash.h"

namespace loom::comm::tcp_protocol {
namespace {

// Small non-negative integers travel as decimal text: a field of 1 to 9 digits.
std::optional<int> parse_rank(const std::string& field) {
  if (field.empty() || field.size() > 9) return std::nullopt;
  int value = 0;
  for (char c : field) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + (c - '0');
  }
  return value;
}

template <typename T>
void put(char*& out, T value) {
  std::memcpy(out, &value, sizeof value);  // little-endian hosts only, like the rest of Loom
  out += sizeof value;
}

template <typename T>
T take(const char*& in) {
  T value;
  std::memcpy(&value, in, sizeof value);
  in += sizeof value;
  return value;
}

}  // namespace

const char* channel_name(Channel channel) {
  return channel == Channel::kRing ? "ring" : "messages";
}

store_protocol::Message encode_hello(const Hello& hello) {
  return {kHello,
          {hello.proof, hello.nonce, hello.group, std::to_string(hello.from),
           std::to_string(hello.to), std::to_string(static_cast<int>(hello.channel))}};
}

Hello decode_hello(const store_protocol::Message& message, int world) {
  if (message.code != kHello) {
    throw CommError("the first message was not a hello (code " + std::to_string(message.code) +
                    ")");
  }
  if (message.fields.size() != 6) {
    throw CommError("a hello with " + std::to_string(message.fields.size()) +
                    " fields, expected 6");
  }
  const auto& f = message.fields;
  if (f[1].size() != kNonceBytes) throw CommError("a hello whose nonce is not 32 bytes");
  const auto from = parse_rank(f[3]);
  const auto to = parse_rank(f[4]);
  const auto channel = parse_rank(f[5]);
  if (!from || !to || *from >= world || *to >= world) {
    throw CommError("a hello between ranks that are not of 0.." + std::to_string(world - 1));
  }
  if (!channel || (*channel != static_cast<int>(Channel::kRing) &&
                   *channel != static_cast<int>(Channel::kMessages))) {
    throw CommError("a hello for an unknown channel");
  }
  return {f[0], f[1], f[2], *from, *to, static_cast<Channel>(*channel)};
}

std::string hello_proof(const std::string& secret, const std::string& acceptor_nonce,
                        const std::string& group, int from, int to, Channel channel) {
  // Lengths first, so that no two different (group, ranks) spell the same message.
  return hmac_sha256(secret, "loom-tcp hello " + std::to_string(group.size()) + " " + group + " " +
                                 std::to_string(from) + " " + std::to_string(to) + " " +
                                 channel_name(channel) + " " + acceptor_nonce);
}

std::string welcome_proof(const std::string& secret, const std::string& connector_nonce) {
  return hmac_sha256(secret, "loom-tcp welcome " + connector_nonce);
}

const char* call_kind_name(CallKind kind) {
  switch (kind) {
    case CallKind::kAllreduce:
      return "allreduce";
    case CallKind::kBroadcast:
      return "broadcast";
    case CallKind::kAllgather:
      return "allgather";
    case CallKind::kReduceScatter:
      return "reduce_scatter";
    case CallKind::kBarrier:
      return "barrier";
    case CallKind::kMessage:
      return "send/recv";
  }
  return "?";
}

void encode_header(const CallHeader& header, char* out) {
  put(out, kHeaderMagic);
  put(out, static_cast<std::uint32_t>(header.kind));
  put(out, header.sequence);
  put(out, header.dtype);
  put(out, header.root);
  put(out, header.numel);
}

std::optional<CallHeader> decode_header(const char* bytes) {
  if (take<std::uint32_t>(bytes) != kHeaderMagic) return std::nullopt;
  CallHeader header;
  header.kind = static_cast<CallKind>(take<std::uint32_t>(bytes));
  header.sequence = take<std::uint64_t>(bytes);
  header.dtype = take<std::int32_t>(bytes);
  header.root = take<std::int32_t>(bytes);
  header.numel = take<std::int64_t>(bytes);
  return header;
}

std::string describe_header(const CallHeader& header) {
  const bool known_dtype =
      header.dtype >= 0 && header.dtype < static_cast<int>(c10::ScalarType::NumOptions);
  const std::string dtype = known_dtype ? c10::toString(static_cast<c10::ScalarType>(header.dtype))
                                        : "dtype " + std::to_string(header.dtype);
  return std::string(call_kind_name(header.kind)) + " #" + std::to_string(header.sequence) + " (" +
         std::to_string(header.numel) + " x " + dtype + ")";
}

bool same_call(const CallHeader& a, const CallHeader& b) {
  return a.kind == b.kind && a.sequence == b.sequence && a.dtype == b.dtype && a.root == b.root &&
         a.numel == b.numel;
}

}  // namespace loom::comm::tcp_protocol
