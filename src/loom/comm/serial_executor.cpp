#include "loom/comm/serial_executor.h"

#include <sched.h>

#include <optional>

namespace loom::comm {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

struct SerialExecutor::Queue {
  struct Item {
    Work* work;
    std::function<void()> body;
    // Submitted to an idle executor: its caller may run it until then.
    std::optional<Clock::time_point> grace_until;
  };

  std::mutex mutex;
  std::condition_variable changed;  // the executor's thread waits on it
  std::deque<Item> items;
  bool busy = false;  // an operation runs, on the executor's thread or a waiter's
  bool stopping = false;

  // Wakes the executor's thread when it has something to do. Not after every operation: each
  // needless wake-up is a context switch on a core some rank may be computing or spinning on.
  void notify_if_needed(std::unique_lock<std::mutex>& lock) {
    const bool wanted = !busy && (!items.empty() || stopping);
    lock.unlock();
    if (wanted) changed.notify_all();
  }

  // Runs the front item if `only` is null or is that item's Work; false when there is none or
  // another operation is running. The caller must not hold the mutex.
  bool run_front(const Work* only) {
    Item item;
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (busy || items.empty() || (only && items.front().work != only)) return false;
      item = std::move(items.front());
      items.pop_front();
      busy = true;
    }
    std::exception_ptr error;
    try {
      item.body();
    } catch (...) {
      error = std::current_exception();
    }
    std::unique_lock<std::mutex> lock(mutex);
    busy = false;
    notify_if_needed(lock);
    item.work->finish(error);
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

SerialExecutor::SerialExecutor(std::chrono::microseconds caller_grace)
    : caller_grace_(caller_grace), queue_(std::make_shared<Queue>()), thread_([this] { run(); }) {}

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
  std::unique_lock<std::mutex> lock(queue_->mutex);
  std::optional<Clock::time_point> grace_until;
  if (!queue_->busy && queue_->items.empty()) grace_until = Clock::now() + caller_grace_;
  // The queue names the Work by raw pointer (run_front compares it); the body's copy of the
  // shared pointer keeps the Work alive until it has run, even if the caller dropped it.
  queue_->items.push_back({work.get(), [work, body = std::move(body)] { body(); }, grace_until});
  // When busy, whoever runs the current operation wakes the thread for this one afterwards.
  queue_->notify_if_needed(lock);
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
    std::unique_lock<std::mutex> lock(queue_->mutex);
    queue_->busy = false;
    queue_->notify_if_needed(lock);  // what was submitted meanwhile may start
  }
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
      const auto has_work = [&] { return !queue.busy && !queue.items.empty(); };
      queue.changed.wait(lock, [&] { return (queue.stopping && !queue.busy) || has_work(); });
      if (queue.items.empty()) return;  // stopping, and everything submitted has run
      if (const auto until = queue.items.front().grace_until; until && Clock::now() < *until) {
        // The caller may be about to wait for it: give way (no timer, which would be one more
        // wake-up), then look again.
        lock.unlock();
        sched_yield();
        continue;
      }
    }
    queue.run_front(nullptr);
  }
}

}  // namespace loom::comm
