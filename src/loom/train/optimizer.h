// LibTorch's optimizers (SGD, Adam, AdamW) built from the config, plus their per-parameter state
// as named tensors for checkpoints, keyed by parameter name rather than by tensor address.
#pragma once

#include <torch/optim/optimizer.h>

#include <memory>

#include "loom/core/config.h"
#include "loom/models/model.h"

namespace loom::train {

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const OptimizerConfig& config,
                                                        const models::NamedTensors& parameters);

void set_learning_rate(torch::optim::Optimizer& optimizer, double lr);

// Per-parameter state: tensors named "<param>.<field>" (momentum_buffer, exp_avg, exp_avg_sq)
// and Adam's step counts as "<param>.step" int64 scalars. Parameters without state yet are
// omitted.
models::NamedTensors export_optimizer_state(torch::optim::Optimizer& optimizer,
                                            const std::string& kind,
                                            const models::NamedTensors& parameters);

// The inverse; throws Error naming the field when a tensor is missing or has the wrong shape.
void import_optimizer_state(torch::optim::Optimizer& optimizer, const std::string& kind,
                            const models::NamedTensors& parameters,
                            const models::NamedTensors& state);

}  // namespace loom::train
