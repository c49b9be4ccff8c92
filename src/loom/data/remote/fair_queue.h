// The data worker's queue of batch requests, served fairly: build threads take jobs one session
// (trainer rank) at a time in turn, so a trainer that asks for many batches at once cannot
// starve one that asks for few.
//
// Threading: every method may be called from any thread.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace loom::data {

class FairQueue {
 public:
  // Called with true to do the work, or with false when the queue stopped before it was taken.
  using Job = std::function<void(bool run)>;

  // Queues `job` for `session`; after stop() it is called with false at once, on this thread.
  void push(const std::string& session, Job job);
  // Blocks until a job is queued (the next session's in turn after the last one served) or
  // stop() was called (nullopt).
  std::optional<Job> pop();
  // Wakes every pop() with nullopt and calls the jobs still queued with false.
  void stop();

 private:
  std::mutex mutex_;
  std::condition_variable queued_;
  bool stopped_ = false;
  std::map<std::string, std::deque<Job>> waiting_;  // by session, in arrival order
  std::string last_served_;
};

}  // namespace loom::data
