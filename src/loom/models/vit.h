// ViT-Ti/16 (Dosovitskiy et al.; the "tiny" size of DeiT): 16x16 patches embedded to 192
// dimensions, a class token, learned position embeddings, 12 pre-norm transformer blocks with
// 3 heads and a 768-wide MLP. With 224x224x3 input and 1000 classes: 5,717,416 parameters.
// Tensor parallelism (parallel.tensor, which must divide the 3 heads) splits each block's
// attention by heads and its MLP by the hidden width, as the GPT's; the rest stays whole.
#pragma once

#include "loom/models/module_model.h"

namespace loom::models {

std::shared_ptr<ZooNetwork> make_vit_tiny(const InputSpec& input, int64_t patch_size);

}  // namespace loom::models
