#include "loom/models/mlp.h"

#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>

namespace loom::models {
namespace {

class Mlp : public Classifier {
 public:
  Mlp(const InputSpec& in, double dropout) {
    const int64_t features = in.channels * in.height * in.width;
    layers_ = register_module(
        "layers", torch::nn::Sequential(torch::nn::Flatten(), torch::nn::Linear(features, 512),
                                        torch::nn::ReLU(), torch::nn::Dropout(dropout),
                                        torch::nn::Linear(512, 256), torch::nn::ReLU(),
                                        torch::nn::Linear(256, in.classes)));
  }
  at::Tensor forward(at::Tensor x) override { return layers_->forward(x); }

 private:
  torch::nn::Sequential layers_{nullptr};
};

}  // namespace

std::shared_ptr<Classifier> make_mlp(const InputSpec& input, double dropout) {
  return std::make_shared<Mlp>(input, dropout);
}

}  // namespace loom::models
