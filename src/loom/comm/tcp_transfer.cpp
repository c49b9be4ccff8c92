#include "loom/comm/tcp_transfer.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "loom/comm/float_widening.h"
#include "loom/comm/reduce_kernels.h"
#include "loom/core/error.h"

namespace loom::comm {

using Clock = std::chrono::steady_clock;
using Receive = TransferPlan::Receive;
using OnReceive = TransferPlan::OnReceive;

void TransferPlan::add_header(bool send, bool receive) {
  if (!sends.empty() || !receives.empty()) {
    throw Error("TransferPlan::add_header: the header must be the first segment");
  }
  header_bytes.reset(new char[2 * tcp_protocol::kHeaderBytes]);
  tcp_protocol::encode_header(header, header_bytes.get());
  if (send) sends.push_back({header_bytes.get(), tcp_protocol::kHeaderBytes, 0});
  if (receive) {
    Receive check;
    check.data = header_bytes.get() + tcp_protocol::kHeaderBytes;
    check.bytes = tcp_protocol::kHeaderBytes;
    check.action = OnReceive::kCheckHeader;
    receives.push_back(check);
  }
}

std::size_t TransferPlan::widened_at() const {
  std::size_t most = 0;
  for (const auto& r : receives) {
    if (r.action == OnReceive::kReduce) most = std::max(most, r.bytes);
  }
  return (most + 63) / 64 * 64;
}

std::size_t TransferPlan::scratch_bytes() const {
  std::size_t widened = 0;
  for (const auto& r : receives) {
    if (r.action == OnReceive::kReduce && r.widened(dtype)) {
      widened = std::max(widened, r.bytes / c10::elementSize(r.arrives_as) * sizeof(float));
    }
  }
  return widened_at() + widened;
}

std::string TransferPlan::describe() const {
  std::size_t out = 0, in = 0, reduces = 0;
  for (const auto& s : sends) out += s.bytes;
  for (const auto& r : receives) {
    in += r.bytes;
    reduces += r.action == OnReceive::kReduce;
  }
  return std::to_string(sends.size()) + " sends (" + std::to_string(out) + " bytes), " +
         std::to_string(receives.size()) + " receives (" + std::to_string(in) + " bytes, " +
         std::to_string(reduces) + " reduced)";
}

namespace {

// Segments gathered into one sendmsg/readv: enough that a small call's header and payload go in
// one system call, few enough to keep the vector on the stack.
constexpr int kMaxVectors = 64;

class Transfer {
 public:
  Transfer(const TransferPlan& plan, const TransferEnds& ends, const TransferContext& context,
           char* scratch)
      : plan_(plan),
        ends_(ends),
        context_(context),
        scratch_(scratch),
        widened_at_(plan.widened_at()) {}

  void run() {
    auto last_progress = Clock::now();
    while (next_send_ < plan_.sends.size() || next_receive_ < plan_.receives.size()) {
      bool progressed = false;
      if (can_send() && !send_blocked_) progressed |= send_some();
      if (can_receive() && !receive_blocked_) progressed |= receive_some();
      if (progressed) {
        last_progress = Clock::now();
        continue;
      }
      wait_for_sockets(last_progress + context_.timeout);
    }
  }

 private:
  bool can_send() const {
    return next_send_ < plan_.sends.size() && plan_.sends[next_send_].after <= next_receive_;
  }
  bool can_receive() const { return next_receive_ < plan_.receives.size(); }

  // Sends what the socket takes now; true when something moved.
  bool send_some() {
    iovec vectors[kMaxVectors];
    int count = 0;
    std::size_t offset = sent_in_segment_;
    for (std::size_t i = next_send_; i < plan_.sends.size() && count < kMaxVectors; ++i) {
      const auto& s = plan_.sends[i];
      if (s.after > next_receive_) break;
      if (s.bytes > offset) {
        vectors[count++] = {const_cast<char*>(s.data) + offset, s.bytes - offset};
      }
      offset = 0;
    }
    std::size_t moved = 0;
    if (count > 0) {
      msghdr message{};
      message.msg_iov = vectors;
      message.msg_iovlen = static_cast<std::size_t>(count);
      const ssize_t n = ::sendmsg(ends_.send_fd, &message, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) send_blocked_ = true;
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return false;
        lost(true, errno);
      }
      moved = static_cast<std::size_t>(n);
    }
    // Advance over what went, and over empty segments that were free to go.
    const std::size_t before = next_send_;
    while (can_send()) {
      const std::size_t left = plan_.sends[next_send_].bytes - sent_in_segment_;
      if (moved < left) {
        sent_in_segment_ += moved;
        break;
      }
      moved -= left;
      ++next_send_;
      sent_in_segment_ = 0;
    }
    return count > 0 || next_send_ != before;
  }

  // Reads what has arrived; true when something moved. At most one reduced segment is read per
  // call: they all land in the one scratch buffer, and each is reduced before the next lands.
  bool receive_some() {
    iovec vectors[kMaxVectors];
    int count = 0;
    bool scratch_used = false;
    std::size_t offset = received_in_segment_;
    for (std::size_t i = next_receive_; i < plan_.receives.size() && count < kMaxVectors; ++i) {
      const Receive& r = plan_.receives[i];
      const bool reduced = r.action == OnReceive::kReduce;
      if (reduced && scratch_used) break;
      scratch_used |= reduced;
      if (r.bytes > offset)
        vectors[count++] = {(reduced ? scratch_ : r.data) + offset, r.bytes - offset};
      offset = 0;
    }
    std::size_t moved = 0;
    if (count > 0) {
      const ssize_t n = ::readv(ends_.receive_fd, vectors, count);
      if (n == 0) lost(false, 0);
      if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) receive_blocked_ = true;
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return false;
        lost(false, errno);
      }
      moved = static_cast<std::size_t>(n);
    }
    const std::size_t before = next_receive_;
    while (next_receive_ < plan_.receives.size()) {
      const Receive& r = plan_.receives[next_receive_];
      const std::size_t left = r.bytes - received_in_segment_;
      if (moved < left) {
        received_in_segment_ += moved;
        break;
      }
      moved -= left;
      received_in_segment_ = 0;
      finish(r);
      ++next_receive_;
      // A reduced segment past this one would land in the scratch this one just used; the next
      // call reads it.
      if (r.action == OnReceive::kReduce && moved == 0) break;
    }
    return count > 0 || next_receive_ != before;
  }

  void finish(const Receive& r) {
    if (r.action == OnReceive::kReduce) {
      const bool widened = r.widened(plan_.dtype);
      const std::size_t elements = r.bytes / c10::elementSize(widened ? r.arrives_as : plan_.dtype);
      const void* inputs[2] = {scratch_, r.local};
      if (widened) {
        auto* wide = reinterpret_cast<float*>(scratch_ + widened_at_);
        widen_to_float(r.arrives_as, scratch_, wide, elements);
        inputs[0] = wide;
      }
      reduce_sum(plan_.dtype, r.out, inputs, 2, elements, r.scale);
    } else if (r.action == OnReceive::kCheckHeader) {
      check_header(r.data);
    }
  }

  void check_header(const char* bytes) const {
    const auto theirs = tcp_protocol::decode_header(bytes);
    if (!theirs) {
      throw CommError(context_.operation + ": " + ends_.receive_peer +
                          " sent bytes that are no call header: the connection is out of step (" +
                          context_.me + ")",
                      fields(ends_.receive_rank, "no_call_header"));
    }
    if (tcp_protocol::same_call(*theirs, plan_.header)) return;
    std::string text = "calls out of step: " + context_.me + " called " +
                       tcp_protocol::describe_header(plan_.header) + " but " + ends_.receive_peer +
                       " called " + tcp_protocol::describe_header(*theirs);
    if (theirs->kind == plan_.header.kind && theirs->root != plan_.header.root) {
      text += " with root " + std::to_string(theirs->root) + " instead of " +
              std::to_string(plan_.header.root);
    }
    throw CommError(text + "; every rank must make the same calls in the same order",
                    fields(ends_.receive_rank, "calls_out_of_step"));
  }

  void wait_for_sockets(Clock::time_point deadline) {
    pollfd fds[2];
    int count = 0, send_index = -1, receive_index = -1;
    if (can_send()) {
      send_index = count;
      fds[count++] = {ends_.send_fd, POLLOUT, 0};
    }
    if (can_receive()) {
      receive_index = count;
      fds[count++] = {ends_.receive_fd, POLLIN, 0};
    }
    if (count == 0) {
      throw Error(context_.operation + ": a send waits for a receive the plan does not have");
    }
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    const int rc = left.count() <= 0 ? 0 : ::poll(fds, count, static_cast<int>(left.count()) + 1);
    if (rc < 0 && errno != EINTR) {
      throw CommError(context_.operation + ": poll: " + std::strerror(errno));
    }
    if (rc == 0 && Clock::now() >= deadline) stalled(send_index >= 0, receive_index >= 0);
    if (send_index >= 0 && fds[send_index].revents != 0) send_blocked_ = false;
    if (receive_index >= 0 && fds[receive_index].revents != 0) receive_blocked_ = false;
  }

  // `problem` names which check failed, for programs that must not parse the message.
  ErrorFields fields(int peer, const std::string& problem) const {
    return {{"operation", context_.operation},
            {"peer_rank", std::to_string(peer)},
            {"problem", problem}};
  }

  [[noreturn]] void lost(bool sending, int error) const {
    const std::string& peer = sending ? ends_.send_peer : ends_.receive_peer;
    const int rank = sending ? ends_.send_rank : ends_.receive_rank;
    std::string why = context_.explain_loss ? context_.explain_loss(rank) : std::string();
    const bool gave_up = !why.empty();
    if (why.empty()) {
      why = error == 0 || error == EPIPE || error == ECONNRESET
                ? ": the process exited or was killed"
                : std::string(" (") + std::strerror(error) + ")";
    }
    throw CommError(context_.operation + ": " + peer + " closed the connection" + why + " (" +
                        context_.me + ")",
                    fields(rank, gave_up ? "peer_gave_up" : "connection_lost"));
  }

  [[noreturn]] void stalled(bool sending, bool receiving) const {
    std::string whom;
    if (receiving) whom = ends_.receive_peer + " to send";
    if (sending) {
      whom += receiving ? " and for " : "";
      whom += ends_.send_peer + " to take what this rank sent";
    }
    const double seconds = context_.timeout.count() / 1000.0;
    throw TimeoutError(context_.operation + ": waited " + std::to_string(seconds).substr(0, 5) +
                           " s for " + whom + ", and nothing came (" + context_.me + ")",
                       fields(receiving ? ends_.receive_rank : ends_.send_rank, "stalled"));
  }

  const TransferPlan& plan_;
  const TransferEnds& ends_;
  const TransferContext& context_;
  char* scratch_;
  std::size_t widened_at_;  // where widened segments go in the scratch
  std::size_t next_send_ = 0, sent_in_segment_ = 0;
  std::size_t next_receive_ = 0, received_in_segment_ = 0;
  bool send_blocked_ = false, receive_blocked_ = false;
};

}  // namespace

void run_transfer(const TransferPlan& plan, const TransferEnds& ends,
                  const TransferContext& context, char* scratch) {
  Transfer(plan, ends, context, scratch).run();
}

}  // namespace loom::comm
