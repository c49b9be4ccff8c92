// The OrderedWindow of a source that prepares batches on its own threads, with the lock, the
// waits and the wake-ups around it: what the local Loader and the RemoteBatchSource share.
//
// The consumer (the trainer) takes batches in order and waits for each at most `batch_timeout`;
// producers wait for a position to claim, build its batch and deliver it (or give it back). What
// differs between sources stays with the owner: how far ahead a producer may claim now
// (`ahead`), who is named when a batch times out (`waited_for`), and what a delivery is counted
// as (`record`). The owner's own state that those read (thread counts, prefetch depth, workers
// up) is guarded by the window's mutex too: the owner reads and changes it through with_lock()
// and update(), so a producer never misses a change that lets it claim.
//
// Threading: take(), move_to() and set_epoch_limit() are called by one consumer thread;
// wait_claim(), deliver() and give_back() by any number of producer threads; the rest by any
// thread. The callbacks (`ahead`, `waited_for`, `record`, and what with_lock() and update() run)
// run with the window's mutex held: they must not call the window again (std::mutex is not
// recursive), except stopping(), and should be short. After stop(), wait_claim() returns
// nullopt at once and for good; the owner joins its producers after calling it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <string>

#include "loom/data/ordered_window.h"

namespace loom::data {

struct BatchWindowOptions {
  int64_t steps_per_epoch = 1;
  // A batch that takes longer than this is a stuck producer, not a slow one.
  std::chrono::milliseconds batch_timeout = std::chrono::seconds(300);
  double max_bad_fraction = 0.01;  // data.max_bad_fraction, checked as batches are taken
  // Who the consumer waited for, for the timeout error ("waited for 2 worker threads"); given
  // the slot of the batch waited for, null when no producer touched it. Called with the lock
  // held.
  std::function<std::string(const OrderedWindow::Slot*)> waited_for;
};

class BatchWindow {
 public:
  using Claim = OrderedWindow::Claim;
  using Slot = OrderedWindow::Slot;
  // What became of a delivered batch: stored for the consumer, dropped because the consumer moved
  // elsewhere since the claim, or dropped because another producer delivered it first.
  enum class Delivery { kStored, kStale, kDuplicate };

  explicit BatchWindow(BatchWindowOptions options);

  // The consumer. take() asks for batch (epoch, step), moving there unless it is the next one,
  // and waits for it; it throws TimeoutError naming `waited_for` after batch_timeout, rethrows a
  // producer's error, and throws DataError when too many samples seen were bad.
  Batch take(int64_t epoch, int64_t step);
  void move_to(int64_t epoch, int64_t step);  // prepare from (epoch, step) on; wakes producers
  void set_epoch_limit(int64_t epochs);

  // Producers. wait_claim() blocks until `producer` claims a position, or returns nullopt once
  // stopping. `ahead` says how many positions from the consumer's this producer may claim now;
  // 0 while it may not work at all. It is asked again whenever the window or the owner changes.
  std::optional<Claim> wait_claim(int producer, const std::function<int64_t()>& ahead);
  // Stores a claim's batch and wakes the consumer. `record`, when given, is told the outcome
  // under the same lock, with the stats that stats() returns (for the owner's build times).
  Delivery deliver(const Claim& claim, int producer, Batch batch, std::exception_ptr error,
                   const LoaderStats& counts,
                   const std::function<void(Delivery, LoaderStats&)>& record = {});
  void give_back(const Claim& claim, int producer);  // another producer may claim it now

  // Counts of the batches taken, and whatever build times `record` added.
  LoaderStats stats() const;
  int ready() const;  // batches delivered and not yet taken

  // The owner's state guarded by this window: with_lock() runs `f` under the lock; update()
  // runs it and then wakes every waiting producer (for a change that may let them claim).
  template <class F>
  auto with_lock(F&& f) const -> decltype(f()) {
    std::lock_guard<std::mutex> lock(mutex_);
    return f();
  }
  template <class F>
  void update(F&& f) {
    with_lock(std::forward<F>(f));
    wake();
  }
  void wake();  // the owner changed its state under with_lock()

  // Ends the producers' waits for good and wakes stopped_within().
  void stop();
  bool stopping() const { return stopping_.load(); }
  // Waits up to `wait`, less when stop() comes; returns stopping(). For an owner's periodic
  // thread (reconnecting workers).
  bool stopped_within(std::chrono::milliseconds wait);

 private:
  BatchWindowOptions options_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;    // the window or the owner changed: consumer and producers
  std::condition_variable stopped_;    // stop(): the owner's periodic thread
  std::atomic<bool> stopping_{false};  // set under mutex_, so no waiter misses it
  OrderedWindow window_;
  LoaderStats stats_;
};

}  // namespace loom::data
