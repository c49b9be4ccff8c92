// What a data-parallel rank holds of the model's state (parameters, gradients, optimizer state)
// under each ZeRO stage, and the check of parallel.memory_cap_mb against it, made once the
// layout has been made (a tensor group's slices are what a rank holds) and before training.
// Activations are not counted: they follow the batch (train.activation_checkpointing trades
// them for compute).
#pragma once

#include "loom/core/config.h"
#include "loom/parallel/layout_plan.h"

namespace loom::parallel {

// State tensors the optimizer keeps a parameter: 2 for Adam and AdamW, 1 for SGD with
// momentum, 0 for plain SGD.
int optimizer_states(const OptimizerConfig& optimizer);

// Bytes a rank holds per byte of parameters at the step's peak, under ZeRO `stage` over
// `replicas` (Rajbhandari et al., 2020): the parameters (1/replicas under ZeRO-3), their gradients
// (ZeRO-1 holds the full buckets and its reduced shard; ZeRO-2 and 3 the shard, and the full
// buckets too while `accumulates` micro-batches), and `states` optimizer tensors (1/replicas
// under any stage).
double model_state_per_parameter_byte(int stage, int replicas, int states, bool accumulates);

// Throws ConfigError naming parallel.zero (and the least stage that fits, where one does) when
// the model's state on a rank, for `parameter_bytes` of trainable parameters, passes
// parallel.memory_cap_mb. Nothing without a cap, or for a pipeline (its planner has its own).
void check_model_state_cap(const Config& config, const LayoutPlan& plan, double parameter_bytes);

}  // namespace loom::parallel
