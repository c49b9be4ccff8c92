#include "loom/data/remote/worker_sessions.h"

#include <cstdio>

namespace loom::data {
namespace {

double seconds_between(std::chrono::steady_clock::time_point a,
                       std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

std::string rates(int64_t batches, int64_t bytes, double seconds) {
  char line[128];
  std::snprintf(line, sizeof line, "%lld batches, %.1f batches/s, %.1f MB/s",
                static_cast<long long>(batches), seconds > 0 ? batches / seconds : 0.0,
                seconds > 0 ? bytes / seconds / 1e6 : 0.0);
  return line;
}

}  // namespace

std::string describe(const WorkerSession& s) {
  return s.client + " (" + s.peer + ") rank " + std::to_string(s.rank) + "/" +
         std::to_string(s.world);
}

std::shared_ptr<WorkerSession> WorkerSessions::open(
    WorkerSession session, const std::string& config_text,
    const std::function<std::shared_ptr<const LocalBatchSource>()>& make) {
  const std::string key =
      config_text + "\n#rank " + std::to_string(session.rank) + "/" + std::to_string(session.world);
  std::shared_ptr<const LocalBatchSource> loader;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    loader = loaders_[key].lock();
  }
  // Built outside the lock (reading a data set takes a while); two sessions opening the same
  // data at once may both build it, and the second one's copy is kept.
  if (!loader) loader = make();
  auto opened = std::make_shared<WorkerSession>(std::move(session));
  opened->loader = loader;
  opened->opened = opened->last_used = opened->reported = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(mutex_);
  last_activity_ = opened->opened;
  loaders_[key] = loader;
  sessions_[opened->id] = opened;
  for (auto it = loaders_.begin(); it != loaders_.end();) {  // forget loaders nobody uses
    it = it->second.expired() ? loaders_.erase(it) : std::next(it);
  }
  return opened;
}

std::shared_ptr<WorkerSession> WorkerSessions::find(const std::string& id) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = sessions_.find(id);
  return it == sessions_.end() ? nullptr : it->second;
}

void WorkerSessions::record(WorkerSession& session, int64_t bytes, double build_seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++session.batches;
  session.bytes += bytes;
  session.build_seconds += build_seconds;
  session.last_used = std::chrono::steady_clock::now();
  last_activity_ = session.last_used;
}

std::optional<std::chrono::steady_clock::duration> WorkerSessions::idle_for() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!last_activity_) return std::nullopt;
  return std::chrono::steady_clock::now() - *last_activity_;
}

std::vector<std::string> WorkerSessions::close_idle(std::chrono::steady_clock::duration idle) {
  const auto now = std::chrono::steady_clock::now();
  std::vector<std::string> lines;
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    const WorkerSession& s = *it->second;
    if (now - s.last_used < idle) {
      ++it;
      continue;
    }
    lines.push_back("closed the session of " + describe(s) + ": idle for " +
                    std::to_string(static_cast<int>(seconds_between(s.last_used, now))) +
                    " s after " + rates(s.batches, s.bytes, seconds_between(s.opened, now)));
    it = sessions_.erase(it);
  }
  return lines;
}

std::vector<std::string> WorkerSessions::rate_report() {
  const auto now = std::chrono::steady_clock::now();
  std::vector<std::string> lines;
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [id, s] : sessions_) {
    if (s->batches == s->reported_batches) continue;
    lines.push_back(describe(*s) + ": " +
                    rates(s->batches - s->reported_batches, s->bytes - s->reported_bytes,
                          seconds_between(s->reported, now)));
    s->reported_batches = s->batches;
    s->reported_bytes = s->bytes;
    s->reported = now;
  }
  return lines;
}

std::vector<std::string> WorkerSessions::summary() {
  const auto now = std::chrono::steady_clock::now();
  std::vector<std::string> lines;
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [id, s] : sessions_) {
    lines.push_back(describe(*s) + ": " +
                    rates(s->batches, s->bytes, seconds_between(s->opened, now)));
  }
  return lines;
}

size_t WorkerSessions::size() {
  std::lock_guard<std::mutex> lock(mutex_);
  return sessions_.size();
}

}  // namespace loom::data
