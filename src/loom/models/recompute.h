// Activation recompute (checkpointing), block by block: a recomputed block keeps only its input
// from forward and runs its forward again in backward, with the random generator as it was, so
// that dropout draws the same masks. One more forward pass of compute buys the memory of every
// activation inside the block (Chen et al., 2016). Under autocast the recompute runs under it
// too. Without gradients (evaluation) the block runs as it is.
#pragma once

#include <ATen/Tensor.h>

#include <vector>

#include "loom/models/model.h"

namespace loom::models {

// `block` recomputed in backward. Its gradients go to the block's own parameters and to
// `weights`, other trainable tensors its forward reads (a tied matrix its owner shares; the
// model's parameters will do); a tensor read but in neither gets none. The block's name,
// parameters and buffers are kept, and the graph keeps its forward alive until backward.
Block recomputed(Block block, std::vector<at::Tensor> weights);

}  // namespace loom::models
