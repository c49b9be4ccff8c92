#include "loom/cli/rank_output.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "loom/core/error.h"

namespace loom::cli {
namespace {

void write_all(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the launcher's own output is gone (a closed pipe): nothing to tell
    done += static_cast<size_t>(n);
  }
}

void make_pipe(int ends[2]) {
  if (::pipe2(ends, O_CLOEXEC) != 0) {
    throw Error(std::string("launch: cannot make a pipe for a rank's output: ") +
                std::strerror(errno));
  }
}

}  // namespace

std::string rank_line_prefix(const std::string& format, const std::string& role, int rank,
                             int local_rank, int node) {
  const std::pair<const char*, std::string> values[] = {
      {"${role}", role},
      {"${rank}", std::to_string(rank)},
      {"${local_rank}", std::to_string(local_rank)},
      {"${node}", std::to_string(node)}};
  std::string out;
  for (size_t i = 0; i < format.size();) {
    bool replaced = false;
    for (const auto& [name, value] : values) {
      if (format.compare(i, std::strlen(name), name) == 0) {
        out += value;
        i += std::strlen(name);
        replaced = true;
        break;
      }
    }
    if (!replaced) out += format[i++];
  }
  return out;
}

RankOutputRelay::RankOutputRelay() { make_pipe(wake_); }

RankOutputRelay::~RankOutputRelay() {
  finish();
  for (int fd : wake_) ::close(fd);
}

RankOutputRelay::ChildEnds RankOutputRelay::attach(const std::string& prefix) {
  ChildEnds ends;
  for (int target : {1, 2}) {
    int ends_of_pipe[2];
    make_pipe(ends_of_pipe);
    // The relay drains without blocking once the ranks are gone (a process they started may
    // still hold the write end).
    ::fcntl(ends_of_pipe[0], F_SETFL, ::fcntl(ends_of_pipe[0], F_GETFL) | O_NONBLOCK);
    Stream s;
    s.fd = ends_of_pipe[0];
    s.target = target;
    s.prefix = prefix;
    streams_.push_back(std::move(s));
    (target == 1 ? ends.out : ends.err) = ends_of_pipe[1];
  }
  return ends;
}

void RankOutputRelay::close_child_ends(ChildEnds ends) {
  ::close(ends.out);
  ::close(ends.err);
}

void RankOutputRelay::start() {
  thread_ = std::thread([this] { run(); });
}

void RankOutputRelay::finish() {
  if (finished_) return;
  finished_ = true;
  if (thread_.joinable()) {
    const char byte = 1;
    while (::write(wake_[1], &byte, 1) < 0 && errno == EINTR) {
    }
    thread_.join();
  }
  for (Stream& s : streams_) {
    if (s.fd >= 0) ::close(s.fd);
    s.fd = -1;
  }
}

void RankOutputRelay::run() {
  std::vector<pollfd> polled;
  std::vector<Stream*> of_poll;
  for (;;) {
    polled.clear();
    of_poll.clear();
    for (Stream& s : streams_) {
      if (!s.open) continue;
      polled.push_back({s.fd, POLLIN, 0});
      of_poll.push_back(&s);
    }
    polled.push_back({wake_[0], POLLIN, 0});
    if (::poll(polled.data(), polled.size(), -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    const bool finishing = polled.back().revents != 0;
    std::lock_guard<std::mutex> lock(mutex_);
    for (size_t i = 0; i < of_poll.size(); ++i) {
      if (finishing || polled[i].revents != 0) read_stream(*of_poll[i]);
    }
    if (finishing) break;
  }
  // What is left: lines the ranks did not end.
  std::lock_guard<std::mutex> lock(mutex_);
  for (Stream& s : streams_) write_lines(s, /*end_open_line=*/true);
}

void RankOutputRelay::drain() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (Stream& s : streams_) {
    if (s.open) read_stream(s);
  }
}

void RankOutputRelay::read_stream(Stream& s) {
  char buffer[16384];
  for (;;) {
    const ssize_t n = ::read(s.fd, buffer, sizeof buffer);
    if (n > 0) {
      s.pending.append(buffer, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    // 0: every writer closed it; EAGAIN: all read for now; any other error ends the stream
    // (poll would report it again at once, forever).
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) s.open = false;
    break;
  }
  write_lines(s, /*end_open_line=*/!s.open);
}

void RankOutputRelay::write_lines(Stream& s, bool end_open_line) {
  std::string out;
  size_t start = 0;
  for (;;) {
    const size_t end = s.pending.find('\n', start);
    const size_t left = s.pending.size() - start;
    if (end == std::string::npos && left < kMaxLine && !(end_open_line && left > 0)) break;
    if (end == std::string::npos && left == 0) break;
    const size_t stop = end == std::string::npos ? start + std::min(left, kMaxLine) : end;
    out += s.prefix;
    out.append(s.pending, start, stop - start);
    out += '\n';
    start = end == std::string::npos ? stop : end + 1;
  }
  s.pending.erase(0, start);
  if (!out.empty()) write_all(s.target, out);
}

}  // namespace loom::cli
