#include "loom/models/mlp.h"

#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>

namespace loom::models {
namespace {

class Mlp : public ZooNetwork {
 public:
  Mlp(const InputSpec& in, double dropout) {
    const int64_t features = in.channels * in.height * in.width;
    layers_ = register_module(
        "layers", torch::nn::Sequential(torch::nn::Flatten(), torch::nn::Linear(features, 512),
                                        torch::nn::ReLU(), torch::nn::Dropout(dropout),
                                        torch::nn::Linear(512, 256), torch::nn::ReLU(),
                                        torch::nn::Linear(256, in.classes)));
  }
  // A block per linear layer with the activation (and dropout) after it.
  std::vector<BlockSpec> block_specs() override {
    return {{"layers.1", {"layers.1"}, run_children(layers_, 0, 4)},
            {"layers.4", {"layers.4"}, run_children(layers_, 4, 6)},
            {"layers.6", {"layers.6"}, run_children(layers_, 6, 7)}};
  }

 private:
  torch::nn::Sequential layers_{nullptr};
};

}  // namespace

std::shared_ptr<ZooNetwork> make_mlp(const InputSpec& input, double dropout) {
  return std::make_shared<Mlp>(input, dropout);
}

}  // namespace loom::models
