// Adam and AdamW with the whole update of a parameter in one pass over memory. LibTorch's
// versions make about eight (weight decay, two moment updates, the square root, the bias
// correction, epsilon, the update), several of them through temporaries, and the optimizer step is
// memory-bound: on a 12M-parameter GPT it was 5% of a bf16 step. Same options, same state
// (step, exp_avg, exp_avg_sq) and the same arithmetic, in the same order, as torch::optim::Adam
// and AdamW, so checkpoints and LibTorch's own code see an ordinary Adam or AdamW.
//
// amsgrad, and parameters that are not dense float tensors laid out like their gradient, take
// LibTorch's step for the whole optimizer.
#pragma once

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>

namespace loom::train {

class FusedAdam : public torch::optim::Adam {
 public:
  using torch::optim::Adam::Adam;
  torch::Tensor step(LossClosure closure = nullptr) override;
};

class FusedAdamW : public torch::optim::AdamW {
 public:
  using torch::optim::AdamW::AdamW;
  torch::Tensor step(LossClosure closure = nullptr) override;
};

}  // namespace loom::train
