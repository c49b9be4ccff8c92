// Adam and AdamW with the whole update of a parameter in one pass over memory: torch's fused CPU
// kernels (at::_fused_adam_, at::_fused_adamw_, what torch.optim.Adam(fused=True) runs) over the
// lists of a group's parameters. LibTorch's C++ optimizers make about eight passes (weight decay,
// two moment updates, the square root, the bias correction, epsilon, the update), several of them
// through temporaries, and the step is memory-bound: on a 12M-parameter GPT it was 5% of a bf16
// step. Loom had its own one-pass loop (sessions 22-30); torch 2.11's kernel took 0.75-0.87 of its
// time on gpt_mini's 12.3M parameters (`loom bench kernels`, bench/RESULTS.md session 31), so it
// replaced it. Same options, same state (step, exp_avg, exp_avg_sq) and the same arithmetic as
// torch::optim::Adam and AdamW, so checkpoints and LibTorch's own code see an ordinary Adam or
// AdamW.
//
// The kernels are torch's for every device: on CUDA its fused CUDA kernels, with the steps
// copied to the device once a group. amsgrad, and parameters that are not dense float tensors
// laid out like their gradient, take LibTorch's step for the whole optimizer.
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
