#include "loom/comm/serial_executor.h"

namespace loom::comm {

SerialExecutor::SerialExecutor() : thread_([this] { run(); }) {}

SerialExecutor::~SerialExecutor() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  queue_cv_.notify_all();
  thread_.join();
}

WorkPtr SerialExecutor::submit(std::string what, std::function<void()> body) {
  auto work = std::make_shared<Work>(std::move(what));
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.emplace_back(work, std::move(body));
  }
  queue_cv_.notify_one();
  return work;
}

void SerialExecutor::run() {
  while (true) {
    std::pair<WorkPtr, std::function<void()>> item;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      queue_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      item = std::move(queue_.front());
      queue_.pop_front();
    }
    try {
      item.second();
      item.first->finish();
    } catch (...) {
      item.first->finish(std::current_exception());
    }
  }
}

}  // namespace loom::comm
