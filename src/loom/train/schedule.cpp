#include "loom/train/schedule.h"

#include <algorithm>
#include <cmath>

namespace loom::train {

double learning_rate(const ScheduleConfig& s, double base_lr, int64_t step, int64_t total_steps) {
  if (step < s.warmup_steps) {
    return base_lr * static_cast<double>(step + 1) / static_cast<double>(s.warmup_steps);
  }
  const int64_t after = step - s.warmup_steps;
  if (s.name == "step") {
    return base_lr * std::pow(s.gamma, static_cast<double>(after / s.step_size));
  }
  if (s.name == "cosine") {
    const int64_t span = std::max<int64_t>(1, total_steps - s.warmup_steps);
    const double progress = std::min(1.0, static_cast<double>(after) / static_cast<double>(span));
    return s.min_lr + (base_lr - s.min_lr) * 0.5 * (1.0 + std::cos(M_PI * progress));
  }
  return base_lr;
}

}  // namespace loom::train
