// Activation recompute (checkpointing), block by block: a recomputed block keeps only its input
// from forward and runs its forward again in backward, with the random generator as it was, so
// that dropout draws the same masks. One more forward pass of compute buys the memory of every
// activation inside the block (Chen et al., 2016). Under autocast the recompute runs under it
// too. Without gradients (evaluation) the block runs as it is.
#pragma once

#include <ATen/Tensor.h>

#include <vector>

#include "loom/core/config.h"
#include "loom/models/model.h"

namespace loom::models {

// `block` recomputed in backward. Its gradients go to the block's own parameters and to
// `weights`, other trainable tensors its forward reads (a tied matrix its owner shares; the
// model's parameters will do); a tensor read but in neither gets none. The block's name,
// parameters and buffers are kept, and the graph keeps its forward alive until backward.
Block recomputed(Block block, std::vector<at::Tensor> weights);

// `blocks` with every `every`-th one recomputed (blocks every-1, 2 x every-1, ...), each with its
// own and its tied parameters as weights; the last block is never recomputed (its output goes
// straight to the loss, so there is nothing to free). 0: `blocks` as they are.
std::vector<Block> with_recompute(std::vector<Block> blocks, int64_t every);

// The `every` that train.activation_checkpointing asks for: none 0, blocks 1, every_k k.
int64_t recompute_every(const TrainConfig& train);

}  // namespace loom::models
