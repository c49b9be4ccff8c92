#include "loom/data/remote/fair_slots.h"

#include "loom/core/error.h"

namespace loom::data {

FairSlots::FairSlots(int slots) : slots_(slots), free_(slots) {
  if (slots < 1) throw Error("FairSlots: " + std::to_string(slots) + " slots asked for");
}

void FairSlots::grant_locked() {
  while (free_ > 0 && !waiting_.empty()) {
    auto next = waiting_.upper_bound(last_served_);
    if (next == waiting_.end()) next = waiting_.begin();
    granted_.insert(next->second.front());
    next->second.pop_front();
    last_served_ = next->first;
    if (next->second.empty()) waiting_.erase(next);
    --free_;
  }
}

bool FairSlots::acquire(const std::string& session,
                        std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (stopped_) return false;
  const uint64_t ticket = next_ticket_++;
  waiting_[session].push_back(ticket);
  grant_locked();
  changed_.notify_all();
  changed_.wait_until(lock, deadline, [&] { return stopped_ || granted_.count(ticket) > 0; });
  if (granted_.erase(ticket)) {
    if (!stopped_) return true;
    ++free_;  // granted just as stop() came: give it back
    return false;
  }
  // Timed out or stopped while queued: leave the queue.
  auto queue = waiting_.find(session);
  if (queue != waiting_.end()) {
    for (auto it = queue->second.begin(); it != queue->second.end(); ++it) {
      if (*it == ticket) {
        queue->second.erase(it);
        break;
      }
    }
    if (queue->second.empty()) waiting_.erase(queue);
  }
  return false;
}

void FairSlots::release() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++free_;
    grant_locked();
  }
  changed_.notify_all();
}

void FairSlots::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopped_ = true;
  }
  changed_.notify_all();
}

}  // namespace loom::data
