#include "loom/data/remote/fair_queue.h"

namespace loom::data {

void FairQueue::push(const std::string& session, Job job) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!stopped_) {
      waiting_[session].push_back(std::move(job));
      queued_.notify_one();
      return;
    }
  }
  job(false);
}

std::optional<FairQueue::Job> FairQueue::pop() {
  std::unique_lock<std::mutex> lock(mutex_);
  queued_.wait(lock, [&] { return stopped_ || !waiting_.empty(); });
  if (stopped_) return std::nullopt;
  auto next = waiting_.upper_bound(last_served_);
  if (next == waiting_.end()) next = waiting_.begin();
  Job job = std::move(next->second.front());
  next->second.pop_front();
  last_served_ = next->first;
  if (next->second.empty()) waiting_.erase(next);
  return job;
}

void FairQueue::stop() {
  std::map<std::string, std::deque<Job>> dropped;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopped_ = true;
    dropped.swap(waiting_);
  }
  queued_.notify_all();
  for (auto& [session, jobs] : dropped) {
    for (Job& job : jobs) job(false);
  }
}

}  // namespace loom::data
