// The advisor's findings near the memory cap: what each memory-saving setting that is off would
// give back (memory_recompute, memory_zero, memory_tensor). Apart from advisor.cpp because the memory model
// (activations, and a rank's model state under each ZeRO stage) is its own subject.
#pragma once

#include <vector>

#include "loom/profile/advisor.h"

namespace loom::profile {

// Near the cap (peak tensor memory >= 80% of the run's cap, parallel.memory_cap_mb or a
// pipeline's parallel.pipeline.memory_cap_mb, or resident memory >= 80% of the machine's): adds
// memory_recompute where recompute is off, memory_zero where a higher ZeRO stage would shard
// more over several data-parallel ranks (ZeRO-3 only without pipeline stages, where it is a
// configuration error), and memory_tensor where a tensor group would split the model
// (tensor_advice.h).
void add_memory_savings(const RunProfile& run, std::vector<Finding>& out);

}  // namespace loom::profile
