#include "loom/comm/tcp_peer_connect.h"

#include "loom/core/error.h"
#include "loom/core/keyed_hash.h"

namespace loom::comm {

using namespace tcp_protocol;

namespace {

// One handshake on a connected socket; every error names the peer (`where`).
class Greeting {
 public:
  Greeting(int fd, std::string where, ErrorFields fields, SteadyTime deadline)
      : fd_(fd), where_(std::move(where)), fields_(std::move(fields)), deadline_(deadline) {}

  store_protocol::Message read(const char* what) {
    std::optional<store_protocol::Message> message;
    try {
      message = read_message_before(fd_, input_, store_protocol::kMaxHandshakeBytes, deadline_);
    } catch (const CommError& e) {
      fail(e.what(), "connection_lost");
    }
    if (!message) throw TimeoutError(where_ + ": no " + what + " before the timeout", fields_);
    return *message;
  }

  void write(const store_protocol::Message& message) {
    bool sent = false;
    try {
      sent = write_before(fd_, store_protocol::encode(message), deadline_);
    } catch (const CommError& e) {
      fail(e.what(), "connection_lost");
    }
    if (!sent)
      throw TimeoutError(where_ + ": the hello did not go out before the timeout", fields_);
  }

  // `problem` names the failed check for programs (the message says it for people).
  [[noreturn]] void fail(const std::string& why, const std::string& problem) const {
    ErrorFields fields = fields_;
    fields["problem"] = problem;
    throw CommError(where_ + ": " + why, std::move(fields));
  }
  bool input_left() const { return !input_.empty(); }

 private:
  int fd_;
  std::string where_;
  ErrorFields fields_;
  SteadyTime deadline_;
  std::string input_;
};

}  // namespace

Socket connect_to_peer(const std::string& address, const PeerGreeting& greeting,
                       const std::string& peer, SteadyTime deadline) {
  const std::string where =
      "tcp: connecting to " + peer + " (" + channel_name(greeting.channel) + ")";
  const ErrorFields fields{{"peer_address", address}};
  std::string error;
  Socket socket = connect_before(address, deadline, error);
  if (!socket.valid()) {
    throw TimeoutError(where + ": nothing answered before the timeout (last try: " + error + ")",
                       fields);
  }
  Greeting talk(socket.fd(), where, fields, deadline);
  const auto challenge = talk.read("challenge");
  const auto& f = challenge.fields;
  if (challenge.code != kChallenge || f.size() != 2 || f[0] != kVersion ||
      f[1].size() != kNonceBytes) {
    talk.fail("the listener there is not a " + std::string(kVersion) + " rank", "not_a_rank");
  }
  Hello hello;
  hello.nonce = random_bytes(kNonceBytes);
  hello.group = greeting.group;
  hello.from = greeting.from;
  hello.to = greeting.to;
  hello.channel = greeting.channel;
  hello.proof =
      hello_proof(greeting.secret, f[1], hello.group, hello.from, hello.to, hello.channel);
  talk.write(encode_hello(hello));
  const auto answer = talk.read("answer to the hello");
  if (answer.code == kRefused) {
    talk.fail(answer.fields.empty() ? std::string("refused") : answer.fields[0], "refused");
  }
  if (answer.code != kWelcome || answer.fields.size() != 1 || talk.input_left() ||
      !equal_in_constant_time(answer.fields[0], welcome_proof(greeting.secret, hello.nonce))) {
    talk.fail("it could not prove that it holds this group's secret", "unproven_listener");
  }
  return socket;
}

}  // namespace loom::comm
