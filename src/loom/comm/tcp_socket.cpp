#include "loom/comm/tcp_socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/sockios.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "loom/core/error.h"

namespace loom::comm {
namespace {

using Clock = std::chrono::steady_clock;

int milliseconds_until(SteadyTime deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return static_cast<int>(std::max<long long>(0, std::min<long long>(left.count() + 1, 1 << 30)));
}

std::string numeric(const sockaddr_storage& address) {
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (address.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&address);
    ::inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
    port = ntohs(a->sin_port);
  } else if (address.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&address);
    ::inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
    port = ntohs(a->sin6_port);
  }
  return std::string(host) + ":" + std::to_string(port);
}

struct AddressList {
  addrinfo* first = nullptr;
  ~AddressList() {
    if (first) ::freeaddrinfo(first);
  }
};

// getaddrinfo for `host`:`port`; the error text, or "" on success.
std::string resolve(const std::string& host, int port, int socktype, int flags, AddressList& out) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = socktype;
  hints.ai_flags = flags | AI_NUMERICSERV;
  const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &out.first);
  return rc == 0 ? std::string() : std::string(::gai_strerror(rc));
}

void set_nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

}  // namespace

Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = other.release();
  }
  return *this;
}

int Socket::release() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

void Socket::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

std::pair<std::string, int> split_address(const std::string& address) {
  const auto colon = address.rfind(':');
  if (colon == std::string::npos || colon + 1 == address.size()) {
    throw CommError("tcp: '" + address + "' is not host:port");
  }
  try {
    return {address.substr(0, colon), std::stoi(address.substr(colon + 1))};
  } catch (const std::exception&) {
    throw CommError("tcp: '" + address + "' is not host:port");
  }
}

Socket listen_on(const std::string& host) {
  AddressList found;
  if (auto error = resolve(host, 0, SOCK_STREAM, AI_PASSIVE, found); !error.empty()) {
    throw CommError("tcp: cannot resolve " + host + ": " + error);
  }
  std::string error = "no address";
  for (addrinfo* a = found.first; a; a = a->ai_next) {
    Socket socket(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    if (!socket.valid()) continue;
    if (::bind(socket.fd(), a->ai_addr, a->ai_addrlen) == 0 && ::listen(socket.fd(), 1024) == 0) {
      set_nonblocking(socket.fd());
      return socket;
    }
    error = std::strerror(errno);
  }
  throw CommError("tcp: cannot listen on " + host + ": " + error);
}

std::string local_address(int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) return "?";
  return numeric(address);
}

std::string remote_address(int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) return "?";
  return numeric(address);
}

std::string local_address_towards(const std::string& host, int port) {
  AddressList found;
  if (!resolve(host, port, SOCK_DGRAM, 0, found).empty()) return "";
  for (addrinfo* a = found.first; a; a = a->ai_next) {
    Socket probe(::socket(a->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (!probe.valid() || ::connect(probe.fd(), a->ai_addr, a->ai_addrlen) != 0) continue;
    const std::string address = local_address(probe.fd());
    return address.substr(0, address.rfind(':'));
  }
  return "";
}

Socket connect_before(const std::string& address, SteadyTime deadline, std::string& error) {
  const auto [host, port] = split_address(address);
  auto pause = std::chrono::milliseconds(5);
  while (true) {
    AddressList found;
    error = resolve(host, port, SOCK_STREAM, 0, found);
    for (addrinfo* a = error.empty() ? found.first : nullptr; a; a = a->ai_next) {
      Socket socket(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
      if (!socket.valid()) {
        error = std::strerror(errno);
        continue;
      }
      set_nonblocking(socket.fd());
      int rc = ::connect(socket.fd(), a->ai_addr, a->ai_addrlen);
      if (rc != 0 && errno == EINPROGRESS) {
        if (!wait_until(socket.fd(), POLLOUT, deadline)) {
          error = "no answer before the timeout";
          return Socket();
        }
        int status = 0;
        socklen_t length = sizeof status;
        ::getsockopt(socket.fd(), SOL_SOCKET, SO_ERROR, &status, &length);
        rc = status == 0 ? 0 : -1;
        errno = status;
      }
      if (rc == 0) {
        const int one = 1;
        ::setsockopt(socket.fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        return socket;
      }
      error = std::strerror(errno);
    }
    if (Clock::now() + pause > deadline) return Socket();
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(200));
  }
}

bool sent_everything(int fd) {
  int queued = 0;
  return ::ioctl(fd, SIOCOUTQ, &queued) == 0 && queued == 0;
}

bool wait_until(int fd, short events, SteadyTime deadline) {
  while (true) {
    pollfd p{fd, events, 0};
    const int rc = ::poll(&p, 1, milliseconds_until(deadline));
    if (rc > 0) return true;
    if (rc < 0 && errno == EINTR) continue;
    if (Clock::now() >= deadline) return false;
  }
}

bool write_before(int fd, const std::string& bytes, SteadyTime deadline) {
  std::size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n =
        ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      sent += static_cast<std::size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      if (!wait_until(fd, POLLOUT, deadline)) return false;
    } else {
      throw CommError(std::string("the connection was lost (") + std::strerror(errno) + ")");
    }
  }
  return true;
}

std::optional<store_protocol::Message> read_message_before(int fd, std::string& buffer,
                                                           std::size_t max_bytes,
                                                           SteadyTime deadline) {
  while (true) {
    if (auto message = store_protocol::decode(buffer, max_bytes)) return message;
    char chunk[4096];
    const ssize_t n = ::recv(fd, chunk, sizeof chunk, MSG_DONTWAIT);
    if (n > 0) {
      buffer.append(chunk, static_cast<std::size_t>(n));
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      if (!wait_until(fd, POLLIN, deadline)) return std::nullopt;
    } else {
      throw CommError(n == 0
                          ? std::string("the other end closed the connection")
                          : std::string("the connection was lost (") + std::strerror(errno) + ")");
    }
  }
}

}  // namespace loom::comm
