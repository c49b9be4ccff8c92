// LibTorch's optimizers (SGD, Adam, AdamW) built from the config, plus their per-parameter state
// as named tensors for checkpoints, keyed by parameter name rather than by tensor address.
#pragma once

#include <torch/optim/optimizer.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "loom/core/config.h"
#include "loom/models/model.h"

namespace loom::train {

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const OptimizerConfig& config,
                                                        const models::NamedTensors& parameters);

void set_learning_rate(torch::optim::Optimizer& optimizer, double lr);

// The optimizers Loom makes and checkpoints, by their optimizer.name: sgd, adam, adamw.
const std::vector<std::string>& optimizer_kinds();

// The fields of a parameter's state that checkpoints keep for optimizer `kind`: sgd's
// momentum_buffer; adam's and adamw's step, exp_avg, exp_avg_sq. Throws ConfigError naming
// optimizer.name for another kind.
const std::vector<std::string>& optimizer_state_fields(const std::string& kind);

// A checkpoint's name for one field of a parameter's optimizer state: "<parameter>.<field>".
std::string optimizer_state_name(const std::string& parameter, const std::string& field);

// One parameter's optimizer state by field, as a program keeps it that runs its own optimizer
// (a Python script's torch.optim): tensors, and the step count as a one-element tensor of any
// type.
using FieldState = std::vector<std::pair<std::string, at::Tensor>>;
using ParameterStates = std::vector<std::pair<std::string, FieldState>>;

// Such state under a checkpoint's names, as export_optimizer_state names Loom's own: the step
// count as an int64 scalar. Throws ConfigError naming the field that `kind` does not keep
// (AMSGrad's max_exp_avg_sq, for one).
models::NamedTensors name_optimizer_state(const std::string& kind, const ParameterStates& state);

// The inverse: a checkpoint's optimizer state by parameter, in its order. Throws DataError
// naming a tensor whose name ends in none of `kind`'s fields.
ParameterStates split_optimizer_state(const std::string& kind, const models::NamedTensors& state);

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
