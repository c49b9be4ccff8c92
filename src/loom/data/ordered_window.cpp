#include "loom/data/ordered_window.h"

#include <algorithm>

#include "loom/core/error.h"

namespace loom::data {

OrderedWindow::OrderedWindow(int64_t steps_per_epoch) : steps_(steps_per_epoch) {
  if (steps_ < 1) throw Error("ordered window: an epoch of " + std::to_string(steps_) + " steps");
}

bool OrderedWindow::move_to(int64_t epoch, int64_t step) {
  const int64_t position = epoch * steps_ + step;
  if (position == next_) return false;
  next_ = position;
  asked_ = false;
  slots_.clear();
  ++generation_;
  return true;
}

bool OrderedWindow::ask(int64_t epoch, int64_t step) {
  const bool moved = move_to(epoch, step);
  asked_ = true;
  return moved;
}

std::optional<OrderedWindow::Claim> OrderedWindow::claim(int producer, int64_t ahead) {
  if (next_ < 0) return std::nullopt;
  // Past the epoch limit only the consumer's own next batch, once it waits for it.
  const int64_t end = std::min(next_ + ahead, asked_ ? std::max(end_, next_ + 1) : end_);
  for (int64_t position = next_; position < end; ++position) {
    Slot& slot = slots_[position];  // positions nobody touched yet appear here, waiting
    if (slot.state != State::kWaiting) continue;
    slot.state = State::kClaimed;
    slot.producer = producer;
    return Claim{generation_, position, epoch_of(position), step_of(position)};
  }
  return std::nullopt;
}

bool OrderedWindow::deliver(const Claim& claim, int producer, Batch batch,
                            std::exception_ptr error, const LoaderStats& counts) {
  if (claim.generation != generation_) return false;
  auto it = slots_.find(claim.position);
  if (it == slots_.end() || it->second.state == State::kReady) return false;
  Slot& slot = it->second;
  slot.state = State::kReady;
  slot.producer = producer;
  slot.batch = std::move(batch);
  slot.error = error;
  slot.counts = counts;
  return true;
}

void OrderedWindow::give_back(const Claim& claim, int producer) {
  if (claim.generation != generation_) return;
  auto it = slots_.find(claim.position);
  if (it == slots_.end() || it->second.state != State::kClaimed || it->second.producer != producer)
    return;
  it->second.state = State::kWaiting;
}

const OrderedWindow::Slot* OrderedWindow::next_slot() const {
  auto it = slots_.find(next_);
  return it == slots_.end() ? nullptr : &it->second;
}

bool OrderedWindow::next_ready() const {
  const Slot* slot = next_slot();
  return slot && slot->state == State::kReady;
}

OrderedWindow::Slot OrderedWindow::take() {
  auto it = slots_.find(next_);
  if (it == slots_.end() || it->second.state != State::kReady) {
    throw Error("ordered window: batch " + std::to_string(step_of(next_)) + " of epoch " +
                std::to_string(epoch_of(next_) + 1) + " taken before it was ready");
  }
  Slot slot = std::move(it->second);
  slots_.erase(it);
  ++next_;
  asked_ = false;
  return slot;
}

int OrderedWindow::ready() const {
  int count = 0;
  for (const auto& [position, slot] : slots_) count += slot.state == State::kReady;
  return count;
}

}  // namespace loom::data
