#include "loom/profile/trace_writer.h"

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "loom/core/error.h"

namespace loom::profile {
namespace {

constexpr char kHead[] = "{\"traceEvents\":[\n";
// Tracks of no thread take ids above any thread id Linux gives (at most 2^22).
constexpr int kFirstTrack = 1 << 30;
constexpr char kTail[] = "\n]}\n";

}  // namespace

TraceWriter::TraceWriter(const std::string& path, int pid, const std::string& process_name)
    : path_(path), pid_(pid) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw Error("trace: cannot create '" + path + "': " + std::strerror(errno));
  const std::string start = std::string(kHead) + kTail;
  if (::pwrite(fd_, start.data(), start.size(), 0) != static_cast<ssize_t>(start.size())) {
    throw Error("trace: cannot write '" + path + "'");
  }
  offset_ = static_cast<int64_t>(sizeof kHead - 1);
  nlohmann::json meta = {{"ph", "M"},
                         {"name", "process_name"},
                         {"pid", pid_},
                         {"tid", 0},
                         {"args", {{"name", process_name}}}};
  append(meta.dump());
}

TraceWriter::~TraceWriter() {
  if (fd_ >= 0) ::close(fd_);
}

int TraceWriter::thread_id() { return static_cast<int>(::syscall(SYS_gettid)); }

int64_t TraceWriter::micros(Clock::time_point t) const {
  // The steady clock counts from boot: ranks on one host share the time axis.
  return std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
}

void TraceWriter::merge(const std::string& other_path) {
  std::ifstream in(other_path);
  nlohmann::json other;
  try {
    other = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    throw Error("trace: cannot merge '" + other_path + "': " + e.what());
  }
  if (!other.contains("traceEvents") || !other["traceEvents"].is_array()) {
    throw Error("trace: '" + other_path + "' has no traceEvents list");
  }
  for (const auto& event : other["traceEvents"]) append(event.dump());
}

void TraceWriter::append(const std::string& event) {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::string body = (first_ ? "" : ",\n") + event;
  const std::string chunk = body + kTail;
  // One write of the event and the closing tail: the file is whole JSON before and after it.
  if (::pwrite(fd_, chunk.data(), chunk.size(), offset_) != static_cast<ssize_t>(chunk.size())) {
    return;  // a full disk loses trace events, not the run
  }
  offset_ += static_cast<int64_t>(body.size());
  first_ = false;
}

void TraceWriter::complete(const std::string& name, const char* category, Clock::time_point begin,
                           Clock::time_point end, const std::string& args_json) {
  add_complete(thread_id(), name, category, begin, end, args_json);
}

int TraceWriter::add_track(const std::string& name) {
  int track;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    track = kFirstTrack + tracks_++;
  }
  name_track(track, name);
  return track;
}

void TraceWriter::complete_on(int track, const std::string& name, const char* category,
                              Clock::time_point begin, Clock::time_point end) {
  add_complete(track, name, category, begin, end, "");
}

void TraceWriter::add_complete(int tid, const std::string& name, const char* category,
                               Clock::time_point begin, Clock::time_point end,
                               const std::string& args_json) {
  nlohmann::json e = {{"ph", "X"},
                      {"name", name},
                      {"cat", category},
                      {"ts", micros(begin)},
                      {"dur", micros(end) - micros(begin)},
                      {"pid", pid_},
                      {"tid", tid}};
  if (!args_json.empty()) e["args"] = nlohmann::json::parse(args_json);
  append(e.dump());
}

void TraceWriter::counter(const std::string& name, Clock::time_point at, double value) {
  nlohmann::json e = {{"ph", "C"},   {"name", name},       {"ts", micros(at)},
                      {"pid", pid_}, {"tid", thread_id()}, {"args", {{"value", value}}}};
  append(e.dump());
}

void TraceWriter::name_thread(const std::string& name) { name_track(thread_id(), name); }

void TraceWriter::name_track(int tid, const std::string& name) {
  nlohmann::json e = {{"ph", "M"},
                      {"name", "thread_name"},
                      {"pid", pid_},
                      {"tid", tid},
                      {"args", {{"name", name}}}};
  append(e.dump());
}

}  // namespace loom::profile
