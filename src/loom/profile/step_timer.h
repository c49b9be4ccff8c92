// Always-on accounting of where a training step's time goes. The trainer switches the current
// phase at each boundary (enter); the time since the previous switch is charged to the phase
// being left. So every instant of a step is counted exactly once, and the phases of a step sum
// to its wall time. Costs one steady_clock read per switch (about 20 ns; a step has about ten).
//
// Not thread-safe: one timer per training loop.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <vector>

#include "loom/core/step_phase.h"

namespace loom::profile {

using loom::kPhaseCount;
using loom::Phase;
using loom::phase_name;

struct StepTimes {
  std::array<double, kPhaseCount> seconds{};
  double wall = 0;  // begin_step to end_step, measured on its own: the phases sum to it
  double operator[](Phase p) const { return seconds[static_cast<size_t>(p)]; }
  // The phase's part of the wall time, 0..1 (0 for an empty record).
  double share(Phase p) const { return wall > 0 ? (*this)[p] / wall : 0.0; }
  StepTimes& operator+=(const StepTimes& o);
};

class StepTimer {
 public:
  using Clock = std::chrono::steady_clock;
  struct Slice {
    Phase phase;
    Clock::time_point begin, end;
  };

  // enabled = false keeps only each step's wall time (everything is "other"): the reference
  // that bench/accounting_overhead.py measures the accounting against (LOOM_STEP_ACCOUNTING=0).
  explicit StepTimer(bool enabled = true) : enabled_(enabled) {}

  // record: also keep this step's slices, in order, for a trace.
  void begin_step(bool record = false);  // in kOther until the first enter()
  void enter(Phase phase);
  StepTimes end_step();

  Clock::time_point step_begin() const { return start_; }
  Clock::time_point step_end() const { return last_; }
  const std::vector<Slice>& slices() const { return slices_; }

 private:
  void charge(Clock::time_point now);

  Clock::time_point start_, last_;
  Phase current_ = Phase::kOther;
  StepTimes times_;
  bool record_ = false;
  bool enabled_ = true;
  std::vector<Slice> slices_;
};

}  // namespace loom::profile
