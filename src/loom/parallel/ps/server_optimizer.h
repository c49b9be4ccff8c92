// The run's optimizer on a parameter server (parallel.ps.optimizer_on: server), and its state
// between the servers' flat form (HeldOptimizerState: one flat tensor per field over the model's
// parameters) and a checkpoint's "<parameter>.<field>" tensors. The same LibTorch optimizers as
// on the workers run on the servers' parts: they work element by element with one set of
// hyperparameters, so the result is the one a worker would get.
#pragma once

#include <torch/optim/optimizer.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "loom/core/config.h"
#include "loom/models/model.h"
#include "loom/parallel/grad_sync.h"
#include "loom/parallel/ps/server_update.h"

namespace loom::parallel::ps {

// The run's optimizer as train/ makes it (train/optimizer.h, the workers' own), handed to the
// servers: the layer rule keeps parallel/ from train/, where Loom's optimizers and the names of
// their state in a checkpoint live.
struct RunOptimizer {
  OptimizerConfig config;
  // The optimizer over `parameters`, as `config` says.
  std::function<std::unique_ptr<torch::optim::Optimizer>(const models::NamedTensors& parameters)>
      make;
  std::function<void(torch::optim::Optimizer& optimizer, double lr)> set_learning_rate;
  // Its per-parameter state under a checkpoint's names (state_name), and back.
  std::function<models::NamedTensors(torch::optim::Optimizer& optimizer,
                                     const models::NamedTensors& parameters)>
      export_state;
  std::function<void(torch::optim::Optimizer& optimizer, const models::NamedTensors& parameters,
                     const models::NamedTensors& state)>
      import_state;
  // A checkpoint's name for one field of a parameter's state: "<parameter>.<field>".
  std::function<std::string(const std::string& parameter, const std::string& field)> state_name;
};

// The per-parameter state tensors the optimizer keeps: momentum_buffer for SGD with momentum,
// exp_avg and exp_avg_sq for Adam and AdamW (whose step count travels as HeldOptimizerState's
// steps).
std::vector<std::string> held_state_fields(const OptimizerConfig& config);

std::unique_ptr<ServerUpdate> server_optimizer(RunOptimizer optimizer);

// A checkpoint's state (RunOptimizer::export_state) in the servers' flat form; nullopt when it
// has none (a fresh run). Missing fields of a parameter count as zeros, which the optimizers
// treat as no history.
std::optional<HeldOptimizerState> flat_optimizer_state(const RunOptimizer& optimizer,
                                                       const models::NamedTensors& parameters,
                                                       const models::NamedTensors& state);

// The inverse, for a checkpoint.
models::NamedTensors named_optimizer_state(const RunOptimizer& optimizer,
                                           const models::NamedTensors& parameters,
                                           const HeldOptimizerState& held);

}  // namespace loom::parallel::ps
