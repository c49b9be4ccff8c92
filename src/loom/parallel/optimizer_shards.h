// ZeRO-1's partition of a model's parameters over the data-parallel ranks: which rank's optimizer
// keeps each parameter's state and steps it (as torch's ZeroRedundancyOptimizer partitions whole
// tensors). Largest first, each to the rank holding the fewest elements so far (the lowest rank
// on a tie), so that no rank holds more than 1/ranks of the elements plus one tensor. A pure
// function of the shapes: every rank computes the same partition.
#pragma once

#include <vector>

#include "loom/models/model.h"

namespace loom::parallel {

// owners[i]: the rank that owns parameters[i].
std::vector<int> assign_owners(const models::NamedTensors& parameters, int ranks);

// The parameters `rank` owns, in the model's order.
models::NamedTensors owned_by(const models::NamedTensors& parameters,
                              const std::vector<int>& owners, int rank);

}  // namespace loom::parallel
