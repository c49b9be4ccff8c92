// Chrome trace events (the JSON that Perfetto and chrome://tracing load), written as they
// happen: {"traceEvents":[...]} with complete events ("ph":"X"), counters ("C") and process /
// thread names ("M"). Each event is written together with the closing "]}" and the next event
// overwrites that tail, so the file is valid JSON after every write: a run killed midway leaves
// a trace that loads.
//
// Thread-safe: loader workers and the training thread record into the same file.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

namespace loom::profile {

class TraceWriter {
 public:
  using Clock = std::chrono::steady_clock;

  // `pid` is the rank: one process track per rank. Throws Error naming the file.
  TraceWriter(const std::string& path, int pid, const std::string& process_name);
  ~TraceWriter();
  TraceWriter(const TraceWriter&) = delete;
  TraceWriter& operator=(const TraceWriter&) = delete;

  // A slice [begin, end) on the calling thread's track. `args_json` is an object or empty.
  void complete(const std::string& name, const char* category, Clock::time_point begin,
                Clock::time_point end, const std::string& args_json = "");
  // A track of its own, named `name`, for what no thread of this process does (a GPU's queue):
  // returns its id for complete_on().
  int add_track(const std::string& name);
  // A slice on the track `track` (add_track's).
  void complete_on(int track, const std::string& name, const char* category,
                   Clock::time_point begin, Clock::time_point end);
  void counter(const std::string& name, Clock::time_point at, double value);
  // Names the calling thread's track (once per thread is enough).
  void name_thread(const std::string& name);
  // Appends every event of another trace file (another rank's, on its own process track).
  // Throws Error naming the file when it is not a trace.
  void merge(const std::string& other_path);

  const std::string& path() const { return path_; }

 private:
  void append(const std::string& event);
  void add_complete(int tid, const std::string& name, const char* category, Clock::time_point begin,
                    Clock::time_point end, const std::string& args_json);
  void name_track(int tid, const std::string& name);
  int64_t micros(Clock::time_point t) const;
  static int thread_id();

  std::string path_;
  int fd_ = -1;
  int pid_;
  std::mutex mutex_;
  int64_t offset_ = 0;  // where the next event goes (over the closing tail)
  bool first_ = true;
  int tracks_ = 0;  // added with add_track
};

}  // namespace loom::profile
