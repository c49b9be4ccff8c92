#include "loom/train/step_faults.h"

#include <csignal>
#include <thread>

#include "loom/core/settings.h"

namespace loom::train {

StepFaults StepFaults::for_rank(int rank, int attempt) {
  StepFaults faults;
  faults.stop_after = setting_int("LOOM_FAULT_STOP_AFTER_STEP");
  if (const auto slow = setting_rank_and_number("LOOM_FAULT_SLOW_RANK");
      slow && slow->first == rank) {
    faults.slow_by = std::chrono::milliseconds(slow->second);
  }
  if (const auto kill = setting_rank_and_number("LOOM_FAULT_KILL_RANK_AFTER_STEP");
      kill && kill->first == rank && attempt == 0) {
    faults.kill_after = kill->second;
  }
  if (const auto freeze = setting_rank_and_number("LOOM_FAULT_FREEZE_RANK_AFTER_STEP");
      freeze && freeze->first == rank) {
    faults.freeze_after = freeze->second;
  }
  if (const auto overflow = setting_rank_and_number("LOOM_FAULT_OVERFLOW_RANK_AT_STEP");
      overflow && overflow->first == rank) {
    faults.overflow_in = overflow->second;
  }
  return faults;
}

void StepFaults::strike_after(int64_t step) const {
  if (step == kill_after) std::raise(SIGKILL);    // a rank lost mid-run, for --max-restarts
  if (step == freeze_after) std::raise(SIGSTOP);  // a hung rank, for the others' watchdogs
}

void StepFaults::slow_down() const {
  if (slow_by.count() > 0) std::this_thread::sleep_for(slow_by);
}

}  // namespace loom::train
