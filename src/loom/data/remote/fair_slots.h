// The data worker's build slots, shared fairly: at most `slots` batches are built at once, and
// when requests queue, sessions (trainer ranks) are served in turn, so a trainer that asks for
// many batches at once cannot starve one that asks for few.
//
// Threading: every method may be called from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <string>

namespace loom::data {

class FairSlots {
 public:
  explicit FairSlots(int slots);

  // Blocks until a slot is free and it is `session`'s turn. False when `deadline` passed first
  // or stop() was called; the caller then holds no slot.
  bool acquire(const std::string& session, std::chrono::steady_clock::time_point deadline);
  void release();
  // Wakes every waiter with false; later acquires fail at once.
  void stop();

  int slots() const { return slots_; }

 private:
  // Hands free slots to waiting sessions, one each in turn, starting after the last served.
  void grant_locked();

  const int slots_;
  std::mutex mutex_;
  std::condition_variable changed_;
  int free_;
  bool stopped_ = false;
  uint64_t next_ticket_ = 0;
  std::map<std::string, std::deque<uint64_t>> waiting_;  // tickets by session, in arrival order
  std::set<uint64_t> granted_;
  std::string last_served_;
};

}  // namespace loom::data
