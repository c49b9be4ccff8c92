#include "loom/profile/host_sync_counter.h"

#include "loom/core/cuda_sync_warnings.h"

namespace loom::profile {

HostSyncCounter::HostSyncCounter(std::function<bool(bool)> turn)
    : turn_(std::move(turn)), previous_(c10::WarningUtils::get_warning_handler()) {
  c10::WarningUtils::set_warning_handler(this);
  on_ = turn_(true);
}

HostSyncCounter::~HostSyncCounter() {
  if (on_) turn_(false);
  c10::WarningUtils::set_warning_handler(previous_);
}

void HostSyncCounter::begin_step() {
  in_step_ = true;
  phase_ = Phase::kOther;
  step_ = {};
}

void HostSyncCounter::end_step(bool counted) {
  in_step_ = false;
  if (!counted) return;
  ++totals_.steps;
  for (size_t i = 0; i < kPhaseCount; ++i) totals_.by_phase[i] += step_[i];
}

void HostSyncCounter::process(const c10::Warning& warning) {
  if (warning.msg().rfind(cuda_sync_warning_text(), 0) != 0) {
    previous_->process(warning);
    return;
  }
  if (in_step_) ++step_[static_cast<size_t>(phase_)];
}

}  // namespace loom::profile
