// Testing aids that strike one rank between steps, read once from the settings (docs/settings.md):
// killed after a step (LOOM_FAULT_KILL_RANK_AFTER_STEP; in a job's first attempt only, since a
// restarted job passes the step again), frozen (LOOM_FAULT_FREEZE_RANK_AFTER_STEP), slowed down
// every step (LOOM_FAULT_SLOW_RANK), the step after whose checkpoint every rank stops as if
// preempted (LOOM_FAULT_STOP_AFTER_STEP), and the step whose gradients overflow on one rank under
// fp16's loss scaling (LOOM_FAULT_OVERFLOW_RANK_AT_STEP). `loom train`'s loop and a script's
// (Job::end_of_step) read the same ones.
#pragma once

#include <chrono>
#include <cstdint>

namespace loom::train {

struct StepFaults {
  // Those meant for `rank` in restart attempt `attempt` (0: the job's first).
  static StepFaults for_rank(int rank, int attempt);

  // After step `step` (steps done): a rank killed (SIGKILL) or frozen (SIGSTOP) here.
  void strike_after(int64_t step) const;
  void slow_down() const;  // once a step
  bool stops_after(int64_t step) const { return stop_after > 0 && step == stop_after; }
  // Step `step` (1-based) backpropagates from an infinite loss scale on this rank.
  bool overflows_in(int64_t step) const { return overflow_in > 0 && step == overflow_in; }

  int64_t kill_after = -1, freeze_after = -1;  // -1: never
  int64_t stop_after = 0;                      // 0: never
  int64_t overflow_in = 0;                     // 0: never
  std::chrono::milliseconds slow_by{0};
};

}  // namespace loom::train
