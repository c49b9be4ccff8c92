// Learning-rate schedules as pure functions of the optimizer step, so a resumed run needs no
// scheduler state.
#pragma once

#include <cstdint>

#include "loom/core/config.h"

namespace loom::train {

// The rate for 0-based optimizer step `step` of `total_steps`: linear warm-up from
// base/warmup to base over schedule.warmup_steps, then constant, step decay or cosine to min_lr.
double learning_rate(const ScheduleConfig& schedule, double base_lr, int64_t step,
                     int64_t total_steps);

}  // namespace loom::train
