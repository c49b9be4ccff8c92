#include "loom/comm/tcp_store.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "loom/core/error.h"
#include "loom/core/keyed_hash.h"

namespace loom::comm {

using namespace store_protocol;
using Clock = std::chrono::steady_clock;

namespace {

int connect_once(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0) return -1;
  int fd = -1;
  for (addrinfo* a = found; a && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd >= 0 && ::connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(found);
  if (fd >= 0) {
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  return fd;
}

std::string join(const std::vector<std::string>& keys) {
  std::string text;
  for (const auto& k : keys) text += (text.empty() ? "'" : ", '") + k + "'";
  return text;
}

std::vector<uint8_t> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }
std::string text_of(const std::vector<uint8_t>& b) { return {b.begin(), b.end()}; }

}  // namespace

TcpStore::TcpStore(const std::string& host, int port, std::chrono::milliseconds timeout,
                   std::string token)
    : c10d::Store(timeout), host_(host), port_(port), token_(std::move(token)) {
  const auto deadline = Clock::now() + timeout;
  auto pause = std::chrono::milliseconds(10);
  while ((fd_ = open_connection(deadline)) < 0) {
    if (Clock::now() > deadline) {
      throw TimeoutError("store: no server at " + address() + " after " +
                         std::to_string(timeout.count() / 1000) + " s");
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(500));
  }
}

c10::intrusive_ptr<c10d::Store> TcpStore::clone() {
  return c10::make_intrusive<TcpStore>(host_, port_, getTimeout(), token_);
}

TcpStore::~TcpStore() {
  if (fd_ >= 0) ::close(fd_);
}

int TcpStore::open_connection(Clock::time_point deadline) {
  fd_ = connect_once(host_, port_);
  if (fd_ < 0) return -1;
  input_.clear();
  try {
    handshake(deadline);
  } catch (...) {
    ::close(fd_);
    fd_ = -1;
    throw;
  }
  return fd_;
}

void TcpStore::handshake(Clock::time_point deadline) {
  const std::string where = "store at " + address();
  const auto challenge = receive(deadline, "handshake");
  if (!challenge) throw TimeoutError(where + ": no handshake before the timeout");
  const auto& f = challenge->fields;
  // Every handshake error names the store's address and, as "problem", the check that failed.
  const auto fields = [this](const std::string& problem) {
    return ErrorFields{{"peer_address", address()}, {"problem", problem}};
  };
  if (challenge->code != kChallenge || f.size() != 3 || f[0] != kVersion ||
      f[1].size() != kNonceBytes) {
    throw CommError(where + ": not a " + std::string(kVersion) + " store", fields("not_a_store"));
  }
  const bool required = f[2] == "1";
  if (required && token_.empty()) {
    throw CommError(where +
                        " requires a token, and this process has none (LOOM_STORE_TOKEN, or loom "
                        "launch --token-file)",
                    fields("token_required"));
  }
  if (!required && !token_.empty()) {
    throw CommError(
        where + " requires no token, and this process has one: is it another job's store?",
        fields("token_not_required"));
  }
  const std::string nonce = random_bytes(kNonceBytes);
  const std::string request = encode({kAuth, {client_proof(token_, f[1]), nonce}});
  if (::send(fd_, request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size())) {
    throw CommError(where + ": lost the connection during the handshake",
                    fields("connection_lost"));
  }
  const auto answer = receive(deadline, "handshake");
  if (!answer) throw TimeoutError(where + ": no answer to the handshake before the timeout");
  if (answer->code != kOk) {
    // A server's refusal may carry its reason as a token (StoreServer::refuse).
    ErrorFields refused = fields("refused");
    if (answer->fields.size() > 1) refused["reason"] = answer->fields[1];
    throw CommError(where + " refused this process: " +
                        (answer->fields.empty() ? std::string("?") : answer->fields[0]),
                    std::move(refused));
  }
  if (answer->fields.size() != 1 ||
      !equal_in_constant_time(answer->fields[0], server_proof(token_, nonce))) {
    throw CommError(where + " could not prove that it holds this job's token",
                    fields("unproven_store"));
  }
}

std::optional<Message> TcpStore::receive(Clock::time_point deadline, const std::string& what) {
  while (true) {
    if (auto message = decode(input_)) return message;
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    pollfd p{fd_, POLLIN, 0};
    if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) == 0) {
      return std::nullopt;
    }
    char chunk[65536];
    const ssize_t n = ::recv(fd_, chunk, sizeof chunk, 0);
    if (n <= 0) throw CommError("store: lost the server at " + address() + " during " + what);
    input_.append(chunk, static_cast<std::size_t>(n));
  }
}

std::vector<std::string> TcpStore::call(const Message& request, const std::string& what,
                                        std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (fd_ < 0) throw CommError("store: lost the server at " + address() + " before " + what);
  const std::string bytes = encode(request);
  for (std::size_t sent = 0; sent < bytes.size();) {
    const ssize_t n = ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) throw CommError("store: lost the server at " + address() + " during " + what);
    sent += static_cast<std::size_t>(n);
  }
  auto reply = receive(Clock::now() + timeout, what);
  if (!reply) {
    // The connection now carries a reply nobody will read: drop it and start afresh.
    ::close(fd_);
    try {
      open_connection(Clock::now() + timeout);
    } catch (const Error&) {
      // fd_ is -1: the next call says the server is lost
    }
    throw TimeoutError("store: " + what + " at " + address() + " still waiting after " +
                       std::to_string(timeout.count() / 1000.0).substr(0, 4) + " s");
  }
  if (reply->code != kOk) {
    throw CommError("store: " + what + " failed at " + address() + ": " +
                    (reply->fields.empty() ? std::string("?") : reply->fields[0]));
  }
  return std::move(reply->fields);
}

void TcpStore::set(const std::string& key, const std::vector<uint8_t>& value) {
  call({kSet, {key, text_of(value)}}, "set '" + key + "'", timeout_);
}

std::vector<uint8_t> TcpStore::compareSet(const std::string& key,
                                          const std::vector<uint8_t>& expected,
                                          const std::vector<uint8_t>& desired) {
  return bytes_of(call({kCompareSet, {key, text_of(expected), text_of(desired)}},
                       "compare-set '" + key + "'", timeout_)[0]);
}

std::vector<uint8_t> TcpStore::get(const std::string& key) {
  return bytes_of(call({kGet, {key}}, "get of key '" + key + "'", timeout_)[0]);
}

int64_t TcpStore::add(const std::string& key, int64_t value) {
  return decode_int(call({kAdd, {key, encode_int(value)}}, "add to '" + key + "'", timeout_)[0]);
}

bool TcpStore::deleteKey(const std::string& key) {
  return call({kDelete, {key}}, "delete of '" + key + "'", timeout_)[0] == "1";
}

bool TcpStore::check(const std::vector<std::string>& keys) {
  return call({kCheck, keys}, "check of " + join(keys), timeout_)[0] == "1";
}

int64_t TcpStore::getNumKeys() {
  return decode_int(call({kNumKeys, {}}, "key count", timeout_)[0]);
}

void TcpStore::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void TcpStore::wait(const std::vector<std::string>& keys,
                    const std::chrono::milliseconds& timeout) {
  call({kWait, keys}, "wait for " + join(keys), timeout);
}

}  // namespace loom::comm
