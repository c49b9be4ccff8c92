#include "loom/data/batch_window.h"

#include <sstream>

#include "loom/core/error.h"

namespace loom::data {
namespace {

std::string seconds_text(std::chrono::milliseconds duration) {
  std::ostringstream out;
  out << static_cast<double>(duration.count()) / 1000.0;
  return out.str();
}

}  // namespace

BatchWindow::BatchWindow(BatchWindowOptions options)
    : options_(std::move(options)), window_(options_.steps_per_epoch) {}

Batch BatchWindow::take(int64_t epoch, int64_t step) {
  if (step < 0 || step >= options_.steps_per_epoch) {
    throw Error("loader: step " + std::to_string(step) + " is outside the epoch's " +
                std::to_string(options_.steps_per_epoch) + " steps");
  }
  std::unique_lock<std::mutex> lock(mutex_);
  window_.ask(epoch, step);
  changed_.notify_all();  // asked for, the batch may be claimed even past the epoch limit
  if (!changed_.wait_for(lock, options_.batch_timeout, [&] { return window_.next_ready(); })) {
    const std::string who =
        options_.waited_for ? options_.waited_for(window_.next_slot()) : "waited for its producers";
    throw TimeoutError("loader: batch " + std::to_string(step) + " of epoch " +
                       std::to_string(epoch + 1) + " not ready after " +
                       seconds_text(options_.batch_timeout) + " s; " + who);
  }
  Slot slot = window_.take();
  stats_.add_counts(slot.counts);
  const LoaderStats seen = stats_;
  lock.unlock();
  changed_.notify_all();  // room for one more ahead

  if (slot.error) std::rethrow_exception(slot.error);
  check_bad_fraction(seen, options_.max_bad_fraction);
  return slot.batch;
}

void BatchWindow::move_to(int64_t epoch, int64_t step) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    window_.move_to(epoch, step);
  }
  changed_.notify_all();
}

void BatchWindow::set_epoch_limit(int64_t epochs) {
  std::lock_guard<std::mutex> lock(mutex_);
  window_.set_epoch_limit(epochs);
}

std::optional<BatchWindow::Claim> BatchWindow::wait_claim(int producer,
                                                          const std::function<int64_t()>& ahead) {
  std::unique_lock<std::mutex> lock(mutex_);
  std::optional<Claim> claim;
  changed_.wait(lock, [&] {
    if (stopping_) return true;
    const int64_t positions = ahead();
    if (positions > 0) claim = window_.claim(producer, positions);
    return claim.has_value();
  });
  if (stopping_) return std::nullopt;
  return claim;
}

BatchWindow::Delivery BatchWindow::deliver(
    const Claim& claim, int producer, Batch batch, std::exception_ptr error,
    const LoaderStats& counts, const std::function<void(Delivery, LoaderStats&)>& record) {
  Delivery outcome = Delivery::kStored;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!window_.deliver(claim, producer, std::move(batch), error, counts)) {
      outcome = window_.stale(claim) ? Delivery::kStale : Delivery::kDuplicate;
    }
    if (record) record(outcome, stats_);
  }
  if (outcome == Delivery::kStored) changed_.notify_all();
  return outcome;
}

void BatchWindow::give_back(const Claim& claim, int producer) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    window_.give_back(claim, producer);
  }
  changed_.notify_all();
}

LoaderStats BatchWindow::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

int BatchWindow::ready() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return window_.ready();
}

void BatchWindow::wake() {
  // The owner changed its state under the lock, so each waiter has either seen the change or is
  // waiting now: none misses this.
  changed_.notify_all();
}

void BatchWindow::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  stopped_.notify_all();
}

bool BatchWindow::stopped_within(std::chrono::milliseconds wait) {
  std::unique_lock<std::mutex> lock(mutex_);
  stopped_.wait_for(lock, wait, [&] { return stopping_.load(); });
  return stopping_;
}

}  // namespace loom::data
