// The findings about one phase's share of the step (data waits, exposed communication, a
// pipeline's bubble, a tensor group's collectives) start alike: this says so once.
#pragma once

#include <string>

#include "loom/profile/advisor.h"

namespace loom::profile {

// A finding `id` about `phase`: its evidence ("bubble is 31% of the step (3.1 ms of 10.0 ms)"),
// the numbers behind it (share, phase_seconds, step_seconds), "high" from `high_share` of the
// step on, and the most that removing the phase could speed the step up. The advice is the
// caller's.
Finding phase_finding(const RunProfile& run, Phase phase, const std::string& id, double high_share,
                      const std::string& key);

}  // namespace loom::profile
