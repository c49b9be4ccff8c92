// train/'s side of an optimizer on the parameter servers (parallel.ps.optimizer_on: server,
// parallel/ps/server_optimizer.h): the run's optimizer handed to the servers, and the state they
// hold in a checkpoint's names and back, for the training loop and its checkpoints.
#pragma once

#include <optional>

#include "loom/core/config.h"
#include "loom/models/model.h"
#include "loom/parallel/grad_sync.h"
#include "loom/parallel/ps/server_optimizer.h"

namespace loom::train {

// The optimizers of train/optimizer.h, as the servers run them.
parallel::ps::RunOptimizer run_optimizer(const OptimizerConfig& config);

// parallel::ps::flat_optimizer_state and named_optimizer_state with the run's optimizer.
std::optional<parallel::HeldOptimizerState> flat_optimizer_state(
    const OptimizerConfig& config, const models::NamedTensors& parameters,
    const models::NamedTensors& state);
models::NamedTensors named_optimizer_state(const OptimizerConfig& config,
                                           const models::NamedTensors& parameters,
                                           const parallel::HeldOptimizerState& held);

}  // namespace loom::train
