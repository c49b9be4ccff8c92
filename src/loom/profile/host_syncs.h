// A GPU run's host synchronisations over its counted steps, by phase (host_sync_counter.h finds
// them; the summary and the advisor's host_sync finding read them).
#pragma once

#include <array>
#include <cstdint>
#include <numeric>

#include "loom/core/step_phase.h"

namespace loom::profile {

struct HostSyncs {
  int64_t steps = 0;  // the steps counted (0: none were, as on the CPU)
  std::array<int64_t, kPhaseCount> by_phase{};
  int64_t total() const { return std::accumulate(by_phase.begin(), by_phase.end(), int64_t{0}); }
  double per_step() const { return steps > 0 ? static_cast<double>(total()) / steps : 0.0; }
  double per_step(Phase phase) const {
    return steps > 0 ? static_cast<double>(by_phase[static_cast<size_t>(phase)]) / steps : 0.0;
  }
};

}  // namespace loom::profile
