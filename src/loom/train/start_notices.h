// What a run says at its start about settings that do something other than a user may expect
// from the same file on one process: a per-replica batch that multiplies with the replicas, a
// learning-rate warm-up longer than the run. Each is a finding (id, evidence, advice, the key to
// change), logged by rank 0 when training starts and kept in summary.json's "notices".
#pragma once

#include <cstdint>
#include <vector>

#include "loom/core/config.h"
#include "loom/parallel/layout_plan.h"
#include "loom/profile/advisor.h"

namespace loom::train {

// `total_steps`: the optimizer steps the run will take.
std::vector<profile::Finding> start_notices(const Config& config, const parallel::LayoutPlan& plan,
                                            int64_t total_steps);

}  // namespace loom::train
