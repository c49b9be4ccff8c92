#include "loom/profile/step_series.h"

#include <algorithm>

namespace loom::profile {

StepSeries::StepSeries(std::size_t capacity) : capacity_(std::max<std::size_t>(1, capacity)) {}

void StepSeries::add(double wall_seconds, double data_wait_seconds) {
  ++steps_;
  if (wall_.size() < capacity_) {
    wall_.push_back(wall_seconds);
    data_wait_.push_back(data_wait_seconds);
    return;
  }
  // Algorithm R: the n-th step replaces a kept one with probability capacity / n.
  const auto slot = std::uniform_int_distribution<int64_t>(0, steps_ - 1)(random_);
  if (slot >= static_cast<int64_t>(capacity_)) return;
  wall_[static_cast<std::size_t>(slot)] = wall_seconds;
  data_wait_[static_cast<std::size_t>(slot)] = data_wait_seconds;
}

}  // namespace loom::profile
