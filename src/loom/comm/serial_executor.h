// Runs submitted operations one at a time, in submission order, each finishing its Work. The
// shm backend runs collectives on one and point-to-point traffic on one per peer and direction,
// so a send waiting for its receiver never blocks a receive from that receiver.
//
// A thread of its own runs the operations, so that they overlap the caller's computation. But a
// caller that waits for an operation nobody has started yet runs it itself: it would only sleep
// otherwise, and this saves two thread wake-ups, which dominate small collectives. So that the
// thread, woken by a submission, does not take the operation from a caller about to wait for
// it, an operation submitted to an idle executor is left to its caller for a short grace.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "loom/comm/work.h"

namespace loom::comm {

class SerialExecutor {
 public:
  // A caller that waits at once gets there within a microsecond or two, or a context switch
  // when the executor's wake-up took its core. Without the grace the woken thread often ran the
  // operation itself; the caller then slept, and waking it cost 8-9 us on a 2-core KVM host: a
  // 4 KB shm all-reduce took 11 us instead of 2.5 in half of the runs (bench/RESULTS.md,
  // session 33). An operation nobody waits for starts this much later, which computation it
  // overlaps does not notice.
  static constexpr std::chrono::microseconds kDefaultCallerGrace{25};

  // `caller_grace`: how long an operation submitted to an idle executor is left to a caller
  // that may wait for it at once, before the executor's thread starts it.
  explicit SerialExecutor(std::chrono::microseconds caller_grace = kDefaultCallerGrace);
  // Runs what was submitted, then stops the thread.
  ~SerialExecutor();
  SerialExecutor(const SerialExecutor&) = delete;
  SerialExecutor& operator=(const SerialExecutor&) = delete;

  // `body` runs on the executor's thread, or on the thread that waits for it; its exception,
  // if any, becomes the Work's error.
  WorkPtr submit(std::string what, std::function<void()> body);

  // Runs `body` on the caller's thread at once when nothing is queued or running and `ready()`
  // holds (checked with the executor held, so nothing starts meanwhile), and returns its
  // finished Work; returns null, having run nothing, otherwise. For operations that cannot
  // block once ready, such as a send into a free mailbox: the executor's thread is not woken.
  WorkPtr run_now_if_idle(std::string what, const std::function<bool()>& ready,
                          const std::function<void()>& body);

 private:
  struct Queue;
  class QueuedWork;
  void run();

  std::chrono::microseconds caller_grace_;
  std::shared_ptr<Queue> queue_;  // shared with the Works, which may outlive the executor
  std::thread thread_;
};

}  // namespace loom::comm
