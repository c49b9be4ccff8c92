// The handle of one asynchronous communication operation. A backend starts the operation and
// hands back a Work; the caller keeps computing and later waits for it.
//
// Threading: finish() is called once, by the thread that ran the operation; wait() and
// completed() may be called from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <string>

namespace loom::comm {

class Work {
 public:
  // `what` names the operation for errors, e.g. "allreduce #12 (4096 x float)".
  explicit Work(std::string what);
  virtual ~Work() = default;
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;

  // Blocks until the operation has finished, then rethrows its error if it failed. Throws
  // TimeoutError naming the operation if it is still running after `timeout`.
  virtual void wait(std::chrono::milliseconds timeout);
  virtual bool completed() const;

  // When finish() was called (the clock's epoch while running). Virtual for works made of
  // other works (the latest of theirs).
  virtual std::chrono::steady_clock::time_point finished_at() const;
  const std::string& what() const { return what_; }

  // Marks the operation finished, successfully or with `error`. Wakes every waiter.
  void finish(std::exception_ptr error = nullptr);

 private:
  std::string what_;
  mutable std::mutex mutex_;
  std::condition_variable finished_cv_;
  bool finished_ = false;
  std::chrono::steady_clock::time_point finished_at_{};
  std::exception_ptr error_;
};

using WorkPtr = std::shared_ptr<Work>;

// A Work that is already finished: for operations that completed during the call.
WorkPtr finished_work(std::string what);

}  // namespace loom::comm
