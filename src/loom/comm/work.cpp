#include "loom/comm/work.h"

#include "loom/core/error.h"

namespace loom::comm {

Work::Work(std::string what) : what_(std::move(what)) {}

void Work::wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!finished_cv_.wait_for(lock, timeout, [&] { return finished_; })) {
    throw TimeoutError(what_ + ": not finished after " + std::to_string(timeout.count()) + " ms");
  }
  if (error_) std::rethrow_exception(error_);
}

bool Work::completed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return finished_;
}

std::chrono::steady_clock::time_point Work::finished_at() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return finished_at_;
}

void Work::finish(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    finished_ = true;
    error_ = std::move(error);
    finished_at_ = std::chrono::steady_clock::now();
  }
  finished_cv_.notify_all();
}

WorkPtr finished_work(std::string what) {
  auto work = std::make_shared<Work>(std::move(what));
  work->finish();
  return work;
}

}  // namespace loom::comm
