// The advisor's findings on tensor parallelism (parallel.tensor: T). A tensor group splits each
// layer of a model with a tensor plan (the GPT's, the ViT's: models/tensor_plan.h) over T ranks,
// its attention by heads and its MLP by its hidden width (Megatron's way):
// a rank then holds 1/T of the layers' matrices (their parameters, gradients and optimizer
// state) and of the activations inside attention and the MLP, and pays 2 all-reduces of a
// layer's activations in forward and 2 in backward, charged to the tensor_comm phase. Each
// finding only where a group can split the model (RunProfile::tensor_heads; T divides the heads):
//   memory_tensor  near the memory cap (memory_advice.h's rule), without tensor parallelism,
//                  with or without pipeline stages, where the split matrices' state
//                  and the activations are at least half the peak: what parallel.tensor: T would
//                  take off each rank, T the smallest count that divides the heads
//   bubble_tensor  a pipeline of P stages whose bubble is >= 20% of the step (high from 30%)
//                  and that more micro-batches would not bring under 10% (its plan's prediction):
//                  a tensor group of P ranks in place of the stages holds about as much a rank
//                  and waits for no neighbour
//   tensor_comm    under parallel.tensor, tensor_comm >= 10% of the step (high from 30%): a
//                  smaller T, or larger batches
// Apart from advisor.cpp because what a split takes off a rank, and what it costs, is its own
// subject.
#pragma once

#include <vector>

#include "loom/profile/advisor.h"

namespace loom::profile {

// memory_tensor, for a run near the memory cap (memory_advice.cpp decides): `near_cap` is the
// memory findings' evidence and measurements, and `model_state` what this rank holds of the
// parameters, their gradients and the optimizer state at the peak.
void add_tensor_memory(const RunProfile& run, const Finding& near_cap, double model_state,
                       std::vector<Finding>& out);

// bubble_tensor and tensor_comm, from the step's phases.
void add_tensor_time(const RunProfile& run, std::vector<Finding>& out);

}  // namespace loom::profile
