// What a data worker knows about its clients: sessions (one per trainer rank that opened one)
// and the loaders behind them, shared by sessions that asked for the same data and shard.
// Nothing here outlives a restart that a client could not rebuild by opening again.
//
// Threading: every method may be called from any of the server's threads.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "loom/data/batch_source.h"

namespace loom::data {

struct WorkerSession {
  std::string id;      // 16 random bytes
  std::string client;  // as the client named itself, and its address
  std::string peer;
  int rank = 0, world = 1;
  bool lz4 = false;
  std::shared_ptr<const LocalBatchSource> loader;
  // Counters since the session opened, and since the last rate report.
  int64_t batches = 0, bytes = 0;
  double build_seconds = 0;
  int64_t reported_batches = 0, reported_bytes = 0;
  std::chrono::steady_clock::time_point opened, last_used, reported;
};

class WorkerSessions {
 public:
  // Opens a session over the loader for (config text, rank, world), building that loader with
  // `make` unless a live session already uses the same one.
  std::shared_ptr<WorkerSession> open(
      WorkerSession session, const std::string& config_text,
      const std::function<std::shared_ptr<const LocalBatchSource>()>& make);
  // Null when there is no such session (never opened, closed, or the worker restarted).
  std::shared_ptr<WorkerSession> find(const std::string& id);
  void record(WorkerSession& session, int64_t bytes, double build_seconds);
  // Closes sessions unused for `idle`; returns their log lines.
  std::vector<std::string> close_idle(std::chrono::steady_clock::duration idle);
  // One line per session that served batches since the last report: batches/s, MB/s.
  std::vector<std::string> rate_report();
  // One line per open session with its totals (for the log on shutdown).
  std::vector<std::string> summary();
  size_t size();
  // Since the last session opened or batch was served; nullopt before the first session.
  std::optional<std::chrono::steady_clock::duration> idle_for();

 private:
  std::mutex mutex_;
  std::optional<std::chrono::steady_clock::time_point> last_activity_;
  std::map<std::string, std::shared_ptr<WorkerSession>> sessions_;
  std::map<std::string, std::weak_ptr<const LocalBatchSource>>
      loaders_;  // by config, rank and world
};

// "client (peer) rank r/w" for log lines.
std::string describe(const WorkerSession& session);

}  // namespace loom::data
