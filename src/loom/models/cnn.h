// The Fashion-MNIST default: two stages of 3x3 conv + batch norm + ReLU, each ending in a 2x2
// max-pool, then a dropout-regularised two-layer classifier. `width` is the first stage's
// channels (the second has twice as many); `depth` is convolutions per stage.
#pragma once

#include "loom/models/module_model.h"

namespace loom::models {

std::shared_ptr<ZooNetwork> make_cnn(const InputSpec& input, int64_t width, int64_t depth,
                                     double dropout);

}  // namespace loom::models
