// SGD (momentum, Nesterov, weight decay, dampening) with the whole update of a parameter in one
// pass over memory: LibTorch's SGD makes four passes (weight decay, momentum, Nesterov, update),
// each reading two tensors and writing one, and the optimizer step is memory-bound. Same
// options, same state (momentum_buffer) and same arithmetic as torch::optim::SGD, so
// checkpoints and LibTorch's own code see an ordinary SGD.
//
// Parameters that are not dense float tensors laid out like their gradient take LibTorch's
// path.
#pragma once

#include <torch/optim/sgd.h>

namespace loom::train {

class FusedSGD : public torch::optim::SGD {
 public:
  using torch::optim::SGD::SGD;
  torch::Tensor step(LossClosure closure = nullptr) override;
};

}  // namespace loom::train
