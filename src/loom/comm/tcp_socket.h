// Small pieces of POSIX TCP for the TCP backend: an owning socket handle, a listener bound to one
// address, connecting with a deadline, and whole-message reads and writes that end at a deadline.
// Sockets made here are non-blocking, close-on-exec and, once connected, TCP_NODELAY (a 4 KB
// all-reduce must not wait for Nagle's timer).
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "loom/comm/store_protocol.h"

namespace loom::comm {

using SteadyTime = std::chrono::steady_clock::time_point;

class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket() { close(); }
  Socket(Socket&& other) noexcept : fd_(other.release()) {}
  Socket& operator=(Socket&& other) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release();
  void close();

 private:
  int fd_ = -1;
};

// A socket listening on `host` (a name or numeric address) at a free port. Throws CommError
// naming the address when it cannot bind.
Socket listen_on(const std::string& host);
// "address:port" of a bound or connected socket's own end, numeric.
std::string local_address(int fd);
// "address:port" of the other end of a connected socket.
std::string remote_address(int fd);
// The local address this host would use to reach `host`:`port` (a UDP socket's route lookup, no
// packet sent); "" when there is no route.
std::string local_address_towards(const std::string& host, int port);

// Connects to "host:port", retrying refused attempts until `deadline` (the listener may not
// have started yet); an invalid Socket when the deadline passed first. `error` receives the last
// reason a try failed.
Socket connect_before(const std::string& address, SteadyTime deadline, std::string& error);

// True when everything written to the connection has been taken by the other end's kernel (no
// byte unsent or unacknowledged): a small write now cannot block.
bool sent_everything(int fd);

// Polls `fd` for `events` until `deadline`; false when the deadline passed first.
bool wait_until(int fd, short events, SteadyTime deadline);
// Writes all of `bytes`; false at the deadline. Throws CommError when the connection is gone.
bool write_before(int fd, const std::string& bytes, SteadyTime deadline);
// Reads one whole message (store_protocol framing, at most `max_bytes`), keeping what follows it
// in `buffer`; nullopt at the deadline. Throws CommError when the connection closes or the
// bytes are no message.
std::optional<store_protocol::Message> read_message_before(int fd, std::string& buffer,
                                                           std::size_t max_bytes,
                                                           SteadyTime deadline);

// "host:port" split at its last colon; throws CommError for text without a port.
std::pair<std::string, int> split_address(const std::string& address);

}  // namespace loom::comm
