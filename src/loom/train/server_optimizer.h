// The run's optimizer on a parameter server (parallel.ps.optimizer_on: server), and its state
// between the servers' flat form (HeldOptimizerState: one flat tensor per field over the model's
// parameters) and a checkpoint's "<parameter>.<field>" tensors. The same LibTorch optimizers as
// on the workers run on the servers' parts: they work element by element with one set of
// hyperparameters, so the result is the one a worker would get.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "loom/core/config.h"
#include "loom/models/model.h"
#include "loom/parallel/grad_sync.h"
#include "loom/parallel/ps/server_update.h"

namespace loom::train {

// The per-parameter state tensors the optimizer keeps: momentum_buffer for SGD with momentum,
// exp_avg and exp_avg_sq for Adam and AdamW (whose step count travels as HeldOptimizerState's
// steps).
std::vector<std::string> held_state_fields(const OptimizerConfig& config);

std::unique_ptr<parallel::ps::ServerUpdate> server_optimizer(const OptimizerConfig& config);

// A checkpoint's state (export_optimizer_state) in the servers' flat form; nullopt when it has
// none (a fresh run). Missing fields of a parameter count as zeros, which the optimizers treat
// as no history.
std::optional<parallel::HeldOptimizerState> flat_optimizer_state(
    const OptimizerConfig& config, const models::NamedTensors& parameters,
    const models::NamedTensors& state);

// The inverse, for a checkpoint.
models::NamedTensors named_optimizer_state(const OptimizerConfig& config,
                                           const models::NamedTensors& parameters,
                                           const parallel::HeldOptimizerState& held);

}  // namespace loom::train
