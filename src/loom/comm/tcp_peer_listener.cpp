#include "loom/comm/tcp_peer_listener.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "loom/core/error.h"
#include "loom/core/keyed_hash.h"
#include "loom/core/log.h"

namespace loom::comm {

using namespace tcp_protocol;
using Clock = std::chrono::steady_clock;

TcpPeerListener::TcpPeerListener(const std::string& host,
                                 std::chrono::milliseconds handshake_timeout)
    : handshake_timeout_(handshake_timeout), listener_(listen_on(host)) {
  address_ = local_address(listener_.fd());
  if (::pipe2(wake_fds_, O_CLOEXEC) != 0) {
    throw CommError(std::string("tcp: pipe: ") + std::strerror(errno));
  }
}

TcpPeerListener::~TcpPeerListener() {
  (void)!::write(wake_fds_[1], "x", 1);
  if (thread_.joinable()) thread_.join();
  ::close(wake_fds_[0]);
  ::close(wake_fds_[1]);
}

void TcpPeerListener::start(Identity identity) {
  identity_ = std::move(identity);
  thread_ = std::thread([this] { serve(); });
}

Socket TcpPeerListener::take(Channel channel, int peer, SteadyTime deadline) {
  std::unique_lock<std::mutex> lock(mutex_);
  const Slot slot{channel, peer};
  arrived_.wait_until(lock, deadline, [&] { return stopped_ || ready_.count(slot) > 0; });
  auto it = ready_.find(slot);
  if (stopped_ || it == ready_.end()) return Socket();
  Socket socket = std::move(it->second);
  ready_.erase(it);
  return socket;
}

void TcpPeerListener::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopped_ = true;
    ready_.clear();
  }
  arrived_.notify_all();
}

void TcpPeerListener::serve() {
  while (true) {
    std::vector<pollfd> fds = {{wake_fds_[0], POLLIN, 0}, {listener_.fd(), POLLIN, 0}};
    int wait_ms = -1;  // until the oldest pending connection's handshake time is up
    for (const auto& [fd, pending] : pending_) {
      fds.push_back({fd, POLLIN, 0});
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          pending.since + handshake_timeout_ - Clock::now());
      const int ms = static_cast<int>(std::max<long long>(0, left.count()) + 1);
      wait_ms = wait_ms < 0 ? ms : std::min(wait_ms, ms);
    }
    if (::poll(fds.data(), fds.size(), wait_ms) < 0 && errno != EINTR) return;
    if (fds[0].revents) return;
    if (fds[1].revents & POLLIN) accept_one();
    for (std::size_t i = 2; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      auto it = pending_.find(fds[i].fd);
      if (it != pending_.end() && !read_from(it->second)) pending_.erase(it);
    }
    const auto now = Clock::now();
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (now - it->second.since > handshake_timeout_) {
        refuse(it->second,
               "no handshake within " + std::to_string(handshake_timeout_.count()) + " ms");
        it = pending_.erase(it);
      } else {
        ++it;
      }
    }
  }
}

void TcpPeerListener::accept_one() {
  sockaddr_storage peer{};
  socklen_t length = sizeof peer;
  Socket socket(::accept4(listener_.fd(), reinterpret_cast<sockaddr*>(&peer), &length,
                          SOCK_CLOEXEC | SOCK_NONBLOCK));
  if (!socket.valid()) return;
  const int one = 1;
  ::setsockopt(socket.fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  Pending pending;
  pending.address = remote_address(socket.fd());
  pending.nonce = random_bytes(kNonceBytes);
  pending.since = Clock::now();
  pending.socket = std::move(socket);
  // A few dozen bytes into a fresh connection's empty buffer: this cannot block.
  try {
    if (!write_before(pending.socket.fd(),
                      store_protocol::encode({kChallenge, {kVersion, pending.nonce}}),
                      Clock::now() + std::chrono::milliseconds(100))) {
      return;
    }
  } catch (const CommError&) {
    return;  // it left at once
  }
  const int fd = pending.socket.fd();
  pending_.emplace(fd, std::move(pending));
}

bool TcpPeerListener::read_from(Pending& pending) {
  char chunk[2048];
  const ssize_t n = ::recv(pending.socket.fd(), chunk, sizeof chunk, MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return true;
  if (n <= 0) {
    refuse(pending, "it left without completing the handshake");
    return false;
  }
  pending.input.append(chunk, static_cast<std::size_t>(n));
  try {
    auto message = store_protocol::decode(pending.input, store_protocol::kMaxHandshakeBytes);
    if (!message) return true;
    admit(pending, *message);
  } catch (const CommError& e) {
    refuse(pending, std::string("not a handshake: ") + e.what());
  }
  return false;
}

void TcpPeerListener::admit(Pending& pending, const store_protocol::Message& message) {
  const Hello hello = decode_hello(message, identity_.world);
  if (!pending.input.empty()) {
    return refuse(pending, "it sent data before the handshake was complete");
  }
  const std::string expected = hello_proof(identity_.secret, pending.nonce, hello.group, hello.from,
                                           hello.to, hello.channel);
  if (!equal_in_constant_time(hello.proof, expected)) {
    return refuse(pending, "wrong proof: not a rank of this job");
  }
  if (hello.group != identity_.group || hello.to != identity_.rank ||
      hello.from == identity_.rank) {
    return refuse(pending, "a hello from rank " + std::to_string(hello.from) + " of group '" +
                               hello.group + "' to rank " + std::to_string(hello.to) +
                               " reached rank " + std::to_string(identity_.rank) + " of '" +
                               identity_.group + "'");
  }
  const Slot slot{hello.channel, hello.from};
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopped_) return refuse(pending, "this rank's communicator has failed");
    if (claimed_[slot]) {
      return refuse(pending, "rank " + std::to_string(hello.from) + " is already connected (" +
                                 channel_name(hello.channel) + ")");
    }
    claimed_[slot] = true;
  }
  const std::string welcome =
      store_protocol::encode({kWelcome, {welcome_proof(identity_.secret, hello.nonce)}});
  try {
    if (!write_before(pending.socket.fd(), welcome, Clock::now() + handshake_timeout_)) {
      return refuse(pending, "it did not take the welcome");
    }
  } catch (const CommError& e) {
    return refuse(pending, e.what());
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ready_[slot] = std::move(pending.socket);
  }
  arrived_.notify_all();
}

void TcpPeerListener::refuse(Pending& pending, const std::string& why) {
  ++refused_;
  LOOM_LOG(kWarn, "comm") << "tcp group '" << identity_.group << "' rank " << identity_.rank
                          << " refused the connection from " << pending.address << ": " << why;
  if (pending.socket.valid()) {
    try {
      write_before(pending.socket.fd(), store_protocol::encode({kRefused, {"refused: " + why}}),
                   Clock::now() + std::chrono::milliseconds(100));
    } catch (const CommError&) {
      // it is gone already
    }
  }
  pending.socket.close();
}

}  // namespace loom::comm
