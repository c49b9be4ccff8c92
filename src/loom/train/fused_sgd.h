// SGD (momentum, Nesterov, weight decay, dampening) with the whole update of a parameter in one
// pass over memory: LibTorch's SGD makes four passes (weight decay, momentum, Nesterov, update),
// each reading two tensors and writing one, and the optimizer step is memory-bound. Same
// options, same state (momentum_buffer) and same arithmetic as torch::optim::SGD, so
// checkpoints and LibTorch's own code see an ordinary SGD.
//
// Where the update runs: Loom's hand-vectorised loop (AVX-512, AVX2 or portable) for CPU
// parameters; torch's fused kernel (at::_fused_sgd_, what torch.optim.SGD(fused=True) runs) for
// parameters on another device, whose memory the host never reads; LibTorch's path, one
// operation at a time, for parameters that are not dense float tensors laid out like their
// gradient.
#pragma once

#include <torch/optim/sgd.h>

namespace loom::train {

class FusedSGD : public torch::optim::SGD {
 public:
  using torch::optim::SGD::SGD;
  torch::Tensor step(LossClosure closure = nullptr) override;

  // Sends CPU parameters to torch's fused kernel too, as other devices' go: the reference Loom's
  // loop is tested against, and the path a CUDA run takes, checked where no GPU is.
  void use_torch_kernel_on_cpu(bool on) { torch_kernel_on_cpu_ = on; }

 private:
  bool torch_kernel_on_cpu_ = false;
};

}  // namespace loom::train
