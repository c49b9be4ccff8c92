// A multilayer perceptron over flattened images: the smallest model, for quick checks.
#pragma once

#include "loom/models/module_model.h"

namespace loom::models {

std::shared_ptr<ZooNetwork> make_mlp(const InputSpec& input, double dropout);

}  // namespace loom::models
