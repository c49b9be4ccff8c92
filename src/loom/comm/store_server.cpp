#include "loom/comm/store_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "loom/core/error.h"
#include "loom/core/keyed_hash.h"
#include "loom/core/log.h"

namespace loom::comm {

using namespace store_protocol;
using Clock = std::chrono::steady_clock;

namespace {

std::string peer_address(const sockaddr_storage& peer) {
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (peer.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&peer);
    ::inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
    port = ntohs(a->sin_port);
  } else if (peer.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&peer);
    ::inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
    port = ntohs(a->sin6_port);
  }
  return std::string(host) + ":" + std::to_string(port);
}

}  // namespace

StoreServer::StoreServer(const std::string& host, int port, StoreServerOptions options)
    : options_(std::move(options)) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string where = host + ":" + std::to_string(port);
  if (const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
      rc != 0) {
    throw CommError("store: cannot resolve " + where + ": " + ::gai_strerror(rc));
  }
  std::string error = "no address";
  for (addrinfo* a = found; a && listen_fd_ < 0; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 1024) == 0) {
      listen_fd_ = fd;
    } else {
      error = std::strerror(errno);
      ::close(fd);
    }
  }
  ::freeaddrinfo(found);
  if (listen_fd_ < 0) throw CommError("store: cannot listen on " + where + ": " + error);
  sockaddr_storage bound{};
  socklen_t length = sizeof bound;
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound), &length);
  port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                            : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  if (::pipe2(wake_fds_, O_CLOEXEC) != 0) {
    ::close(listen_fd_);
    throw CommError(std::string("store: pipe: ") + std::strerror(errno));
  }
  thread_ = std::thread([this] { serve(); });
}

StoreServer::~StoreServer() {
  close_by_ = Clock::now() + kLingerForClients;
  closing_.store(true, std::memory_order_release);
  (void)!::write(wake_fds_[1], "x", 1);
  thread_.join();
  for (const auto& [fd, client] : clients_) ::close(fd);
  ::close(listen_fd_);
  ::close(wake_fds_[0]);
  ::close(wake_fds_[1]);
}

void StoreServer::serve() {
  while (true) {
    std::vector<pollfd> fds = {{wake_fds_[0], POLLIN, 0}, {listen_fd_, POLLIN, 0}};
    for (const auto& [fd, client] : clients_) fds.push_back({fd, POLLIN, 0});
    // Wake up in time to drop the oldest client that has not authenticated yet.
    int wait_ms = -1;
    for (const auto& [fd, client] : clients_) {
      if (client.authenticated) continue;
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          client.since + options_.handshake_timeout - Clock::now());
      const int ms = static_cast<int>(std::max<long>(0, left.count()) + 1);
      wait_ms = wait_ms < 0 ? ms : std::min(wait_ms, ms);
    }
    const bool closing = closing_.load(std::memory_order_acquire);
    if (closing) {
      if (clients_.empty() || Clock::now() >= close_by_) return;
      fds[1].events = 0;  // no new clients
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(close_by_ - Clock::now());
      const int ms = static_cast<int>(left.count()) + 1;
      wait_ms = wait_ms < 0 ? ms : std::min(wait_ms, ms);
    }
    if (::poll(fds.data(), fds.size(), wait_ms) < 0 && errno != EINTR) return;
    if (fds[0].revents) {
      char byte;
      (void)!::read(wake_fds_[0], &byte, 1);  // the destructor's: go on until the clients leave
      continue;
    }
    if (fds[1].revents & POLLIN) accept_client();
    for (std::size_t i = 2; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      auto it = clients_.find(fds[i].fd);
      if (it != clients_.end() && !read_from(fds[i].fd, it->second)) drop(fds[i].fd);
    }
    drop_silent_clients();
  }
}

void StoreServer::accept_client() {
  sockaddr_storage peer{};
  socklen_t length = sizeof peer;
  const int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&peer), &length, SOCK_CLOEXEC);
  if (fd < 0) return;
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  Client& client = clients_[fd];
  client.address = peer_address(peer);
  client.since = Clock::now();
  client.nonce = random_bytes(kNonceBytes);
  reply(fd, {kChallenge, {kVersion, client.nonce, options_.token.empty() ? "0" : "1"}});
}

void StoreServer::drop(int fd) {
  ::close(fd);
  clients_.erase(fd);
  parked_.erase(
      std::remove_if(parked_.begin(), parked_.end(), [&](const Parked& p) { return p.fd == fd; }),
      parked_.end());
}

void StoreServer::drop_silent_clients() {
  const auto now = Clock::now();
  std::vector<int> silent;
  for (auto& [fd, client] : clients_) {
    if (!client.authenticated && now - client.since > options_.handshake_timeout) {
      silent.push_back(fd);
    }
  }
  for (int fd : silent) {
    refuse(fd, clients_[fd],
           "no handshake within " + std::to_string(options_.handshake_timeout.count()) + " ms",
           "handshake_timeout");
    drop(fd);
  }
}

void StoreServer::refuse(int fd, Client& client, const std::string& why,
                         const std::string& problem) {
  ++refused_;
  LOOM_LOG(kWarn, "store") << "refused the client at " << client.address << ": " << why;
  reply(fd, {kFailed, {"store: refused: " + why, problem}});
}

bool StoreServer::read_from(int fd, Client& client) {
  char chunk[65536];
  const ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
  if (n <= 0) {
    if (!client.authenticated) refuse(fd, client, "it left without authenticating", "left");
    return false;
  }
  client.input.append(chunk, static_cast<std::size_t>(n));
  try {
    while (true) {
      const std::size_t limit = client.authenticated ? kMaxMessageBytes : kMaxHandshakeBytes;
      auto request = decode(client.input, limit);
      if (!request) break;
      if (!client.authenticated) {
        if (!authenticate(fd, client, *request)) return false;
        continue;
      }
      const auto version = table_.version();
      if (auto answer = table_.apply(*request)) {
        reply(fd, *answer);
        if (table_.version() != version) answer_parked();
      } else {
        parked_.push_back({fd, std::move(*request)});
      }
    }
  } catch (const CommError& e) {
    // Not a Loom store client, or a broken one.
    refuse(fd, client, e.what(), e.field("problem").empty() ? "bad_message" : e.field("problem"));
    return false;
  }
  return true;
}

bool StoreServer::authenticate(int fd, Client& client, const Message& request) {
  if (request.code != kAuth || request.fields.size() != 2 ||
      request.fields[1].size() != kNonceBytes) {
    refuse(fd, client,
           "the first message was not a handshake (operation " + std::to_string(request.code) + ")",
           "not_a_handshake");
    return false;
  }
  const std::string expected = client_proof(options_.token, client.nonce);
  if (!equal_in_constant_time(request.fields[0], expected)) {
    const bool has_token = !request.fields[0].empty();
    refuse(fd, client,
           options_.token.empty() ? "it sent a proof of a token, and this store has none"
           : !has_token           ? "it has no token (LOOM_STORE_TOKEN or --token-file)"
                                  : "wrong token",
           options_.token.empty() ? "unexpected_token"
           : !has_token           ? "no_token"
                                  : "wrong_token");
    return false;
  }
  client.authenticated = true;
  client.nonce.clear();
  reply(fd, {kOk, {server_proof(options_.token, request.fields[1])}});
  return true;
}

void StoreServer::answer_parked() {
  std::vector<Parked> still;
  for (auto& p : parked_) {
    if (auto answer = table_.apply(p.request)) {
      reply(p.fd, *answer);
    } else {
      still.push_back(std::move(p));
    }
  }
  parked_ = std::move(still);
}

void StoreServer::reply(int fd, const Message& message) {
  const std::string bytes = encode(message);
  std::size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return;  // the client went away; poll() will notice
    sent += static_cast<std::size_t>(n);
  }
}

}  // namespace loom::comm
