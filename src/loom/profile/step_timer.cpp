#include "loom/profile/step_timer.h"

namespace loom::profile {

StepTimes& StepTimes::operator+=(const StepTimes& o) {
  for (size_t i = 0; i < kPhaseCount; ++i) seconds[i] += o.seconds[i];
  wall += o.wall;
  return *this;
}

void StepTimer::begin_step(bool record) {
  start_ = last_ = Clock::now();
  current_ = Phase::kOther;
  times_ = {};
  record_ = record;
  slices_.clear();
}

void StepTimer::charge(Clock::time_point now) {
  times_.seconds[static_cast<size_t>(current_)] +=
      std::chrono::duration<double>(now - last_).count();
  if (record_ && now > last_) slices_.push_back({current_, last_, now});
  last_ = now;
}

void StepTimer::enter(Phase phase) {
  if (!enabled_) return;
  charge(Clock::now());
  current_ = phase;
}

StepTimes StepTimer::end_step() {
  const Clock::time_point now = Clock::now();
  charge(now);
  times_.wall = std::chrono::duration<double>(now - start_).count();
  return times_;
}

}  // namespace loom::profile
