#include "loom/comm/serial_executor.h"

namespace loom::comm {

struct SerialExecutor::Queue {
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<std::pair<Work*, std::function<void()>>> items;
  bool busy = false;  // an operation runs, on the executor's thread or a waiter's
  bool stopping = false;

  // Runs the front item if `only` is null or is that item's Work; false when there is none or
  // another operation is running. The caller must not hold the mutex.
  bool run_front(const Work* only) {
    std::pair<Work*, std::function<void()>> item;
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (busy || items.empty() || (only && items.front().first != only)) return false;
      item = std::move(items.front());
      items.pop_front();
      busy = true;
    }
    std::exception_ptr error;
    try {
      item.second();
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mutex);
      busy = false;
    }
    changed.notify_all();
    item.first->finish(error);
    return true;
  }
};

class SerialExecutor::QueuedWork : public Work {
 public:
  QueuedWork(std::string what, std::weak_ptr<Queue> queue)
      : Work(std::move(what)), queue_(std::move(queue)) {}

  void wait(std::chrono::milliseconds timeout) override {
    if (auto queue = queue_.lock(); queue && !completed()) queue->run_front(this);
    Work::wait(timeout);
  }

 private:
  std::weak_ptr<Queue> queue_;
};

SerialExecutor::SerialExecutor() : queue_(std::make_shared<Queue>()), thread_([this] { run(); }) {}

SerialExecutor::~SerialExecutor() {
  {
    std::lock_guard<std::mutex> lock(queue_->mutex);
    queue_->stopping = true;
  }
  queue_->changed.notify_all();
  thread_.join();
}

WorkPtr SerialExecutor::submit(std::string what, std::function<void()> body) {
  auto work = std::make_shared<QueuedWork>(std::move(what), queue_);
  {
    std::lock_guard<std::mutex> lock(queue_->mutex);
    // The queue names the Work by raw pointer (run_front compares it); the body's copy of the
    // shared pointer keeps the Work alive until it has run, even if the caller dropped it.
    queue_->items.emplace_back(work.get(), [work, body = std::move(body)] { body(); });
  }
  queue_->changed.notify_all();
  return work;
}

WorkPtr SerialExecutor::run_now_if_idle(std::string what, const std::function<bool()>& ready,
                                        const std::function<void()>& body) {
  {
    std::lock_guard<std::mutex> lock(queue_->mutex);
    if (queue_->busy || !queue_->items.empty()) return nullptr;
    queue_->busy = true;
  }
  WorkPtr work;
  std::exception_ptr error;
  try {
    if (ready()) {
      work = std::make_shared<Work>(std::move(what));
      body();
    }
  } catch (...) {
    error = std::current_exception();
  }
  {
    std::lock_guard<std::mutex> lock(queue_->mutex);
    queue_->busy = false;
  }
  queue_->changed.notify_all();  // what was submitted meanwhile may start
  if (work) {
    work->finish(error);
  } else if (error) {
    std::rethrow_exception(error);
  }
  return work;
}

void SerialExecutor::run() {
  Queue& queue = *queue_;
  while (true) {
    {
      std::unique_lock<std::mutex> lock(queue.mutex);
      queue.changed.wait(lock, [&] {
        return (queue.stopping && !queue.busy) || (!queue.busy && !queue.items.empty());
      });
      if (queue.items.empty()) return;  // stopping, and everything submitted has run
    }
    queue.run_front(nullptr);
  }
}

}  // namespace loom::comm
