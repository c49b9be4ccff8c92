#include "loom/comm/store_server.h"

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

namespace loom::comm {

using namespace store_protocol;

StoreServer::StoreServer(const std::string& host, int port) {
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
  (void)!::write(wake_fds_[1], "x", 1);
  thread_.join();
  for (const auto& [fd, bytes] : pending_input_) ::close(fd);
  ::close(listen_fd_);
  ::close(wake_fds_[0]);
  ::close(wake_fds_[1]);
}

void StoreServer::serve() {
  while (true) {
    std::vector<pollfd> fds = {{wake_fds_[0], POLLIN, 0}, {listen_fd_, POLLIN, 0}};
    for (const auto& [fd, bytes] : pending_input_) fds.push_back({fd, POLLIN, 0});
    if (::poll(fds.data(), fds.size(), -1) < 0 && errno != EINTR) return;
    if (fds[0].revents) return;
    if (fds[1].revents & POLLIN) accept_client();
    for (std::size_t i = 2; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      if (!read_from(fds[i].fd)) {
        ::close(fds[i].fd);
        pending_input_.erase(fds[i].fd);
        const int gone = fds[i].fd;
        parked_.erase(std::remove_if(parked_.begin(), parked_.end(),
                                     [&](const Parked& p) { return p.client == gone; }),
                      parked_.end());
      }
    }
  }
}

void StoreServer::accept_client() {
  const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
  if (fd < 0) return;
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  pending_input_[fd];
}

bool StoreServer::read_from(int client) {
  char chunk[65536];
  const ssize_t n = ::recv(client, chunk, sizeof chunk, 0);
  if (n <= 0) return false;
  std::string& buffer = pending_input_[client];
  buffer.append(chunk, static_cast<std::size_t>(n));
  try {
    while (auto request = decode(buffer)) {
      if (!answer(client, *request)) parked_.push_back({client, std::move(*request)});
    }
  } catch (const CommError&) {
    return false;  // not a Loom store client
  }
  return true;
}

bool StoreServer::all_exist(const std::vector<std::string>& keys, std::size_t first) const {
  for (std::size_t i = first; i < keys.size(); ++i) {
    if (!values_.count(keys[i])) return false;
  }
  return true;
}

bool StoreServer::answer(int client, const Message& request) {
  const auto& f = request.fields;
  auto needs = [&](std::size_t n) {
    if (f.size() < n) {
      reply(client, kFailed, {"malformed request"});
      return false;
    }
    return true;
  };
  switch (request.code) {
    case kSet:
      if (!needs(2)) return true;
      values_[f[0]] = f[1];
      reply(client, kOk);
      answer_parked();
      return true;
    case kGet:
      if (!needs(1)) return true;
      if (!values_.count(f[0])) return false;
      reply(client, kOk, {values_[f[0]]});
      return true;
    case kAdd: {
      if (!needs(2)) return true;
      auto it = values_.find(f[0]);
      const std::int64_t now =
          (it == values_.end() ? 0 : std::stoll(it->second)) + decode_int(f[1]);
      values_[f[0]] = std::to_string(now);  // stored as text, as c10d's stores do
      reply(client, kOk, {encode_int(now)});
      answer_parked();
      return true;
    }
    case kCheck:
      reply(client, kOk, {all_exist(f, 0) ? "1" : "0"});
      return true;
    case kDelete:
      if (!needs(1)) return true;
      reply(client, kOk, {values_.erase(f[0]) ? "1" : "0"});
      return true;
    case kNumKeys:
      reply(client, kOk, {encode_int(static_cast<std::int64_t>(values_.size()))});
      return true;
    case kWait:
      if (!all_exist(f, 0)) return false;
      reply(client, kOk);
      return true;
    case kCompareSet: {
      if (!needs(3)) return true;
      auto it = values_.find(f[0]);
      if (it == values_.end()) {
        if (f[1].empty()) values_[f[0]] = f[2];
      } else if (it->second == f[1]) {
        it->second = f[2];
      }
      it = values_.find(f[0]);
      reply(client, kOk, {it == values_.end() ? f[1] : it->second});
      answer_parked();
      return true;
    }
    default:
      reply(client, kFailed, {"unknown operation " + std::to_string(request.code)});
      return true;
  }
}

void StoreServer::answer_parked() {
  std::vector<Parked> still;
  for (auto& p : parked_) {
    if (!answer(p.client, p.request)) still.push_back(std::move(p));
  }
  parked_ = std::move(still);
}

void StoreServer::reply(int client, Status status, std::vector<std::string> fields) {
  const std::string bytes = encode({status, std::move(fields)});
  std::size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = ::send(client, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return;  // the client went away; poll() will notice
    sent += static_cast<std::size_t>(n);
  }
}

}  // namespace loom::comm
