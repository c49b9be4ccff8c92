#include "loom/parallel/ps/request_waiters.h"

#include "loom/core/error.h"

namespace loom::parallel::ps {

RequestWaiters::RequestWaiters(int workers, std::chrono::milliseconds timeout)
    : timeout_(timeout), slots_(static_cast<size_t>(workers)) {
  for (int w = 0; w < workers; ++w) threads_.emplace_back([this, w] { wait_loop(w); });
}

RequestWaiters::~RequestWaiters() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    quit_ = true;
  }
  posted_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void RequestWaiters::watch(int worker, comm::WorkPtr request) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    Slot& slot = slots_[static_cast<size_t>(worker)];
    slot.request = std::move(request);
    slot.done = false;
    slot.error = nullptr;
  }
  posted_.notify_all();
}

void RequestWaiters::wait_loop(int worker) {
  Slot& slot = slots_[static_cast<size_t>(worker)];
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    posted_.wait(lock, [&] { return quit_ || slot.request; });
    if (!slot.request) return;  // quit, with nothing to wait for
    const comm::WorkPtr request = std::move(slot.request);
    slot.waiting = true;
    lock.unlock();
    std::exception_ptr error;
    try {
      request->wait(timeout_);
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    slot.waiting = false;
    slot.done = true;
    slot.error = error;
    arrived_.notify_all();
    if (quit_) return;
  }
}

std::vector<std::pair<int, std::exception_ptr>> RequestWaiters::next() {
  std::unique_lock<std::mutex> lock(mutex_);
  const auto any_done = [&] {
    for (const Slot& s : slots_) {
      if (s.done) return true;
    }
    return false;
  };
  const auto any_pending = [&] {
    for (const Slot& s : slots_) {
      if (s.request || s.waiting) return true;
    }
    return false;
  };
  if (!any_done() && !any_pending()) {
    throw Error("ps server: waiting for requests while no worker owes one");
  }
  arrived_.wait(lock, any_done);
  std::vector<std::pair<int, std::exception_ptr>> out;
  for (size_t w = 0; w < slots_.size(); ++w) {
    if (!slots_[w].done) continue;
    out.emplace_back(static_cast<int>(w), slots_[w].error);
    slots_[w].done = false;
    slots_[w].error = nullptr;
  }
  return out;
}

}  // namespace loom::parallel::ps
