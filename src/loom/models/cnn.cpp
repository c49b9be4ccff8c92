#include "loom/models/cnn.h"

#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/pooling.h>

#include "loom/core/error.h"

namespace loom::models {
namespace {

class Cnn : public ZooNetwork {
 public:
  Cnn(const InputSpec& in, int64_t width, int64_t depth, double dropout) {
    torch::nn::Sequential features;
    int64_t channels = in.channels;
    for (int64_t stage = 0; stage < 2; ++stage) {
      const int64_t out = width << stage;
      for (int64_t i = 0; i < depth; ++i) {
        features->push_back(
            torch::nn::Conv2d(torch::nn::Conv2dOptions(channels, out, 3).padding(1).bias(false)));
        features->push_back(torch::nn::BatchNorm2d(out));
        features->push_back(torch::nn::ReLU());
        channels = out;
      }
      features->push_back(torch::nn::MaxPool2d(2));
    }
    features_ = register_module("features", features);
    const int64_t flat = channels * (in.height / 4) * (in.width / 4);
    classifier_ = register_module(
        "classifier",
        torch::nn::Sequential(torch::nn::Flatten(), torch::nn::Dropout(dropout),
                              torch::nn::Linear(flat, 256), torch::nn::ReLU(),
                              torch::nn::Dropout(dropout), torch::nn::Linear(256, in.classes)));
  }
  // A block per convolution (with its batch norm and ReLU, and the stage's max-pool after the
  // last), then the classifier.
  std::vector<BlockSpec> block_specs() override {
    std::vector<BlockSpec> blocks;
    const size_t layers = features_->size();
    for (size_t i = 0; i < layers; i += 3) {
      const bool pool_follows = i + 3 < layers && features_->ptr(i + 3)->as<torch::nn::MaxPool2d>();
      const size_t end = pool_follows ? i + 4 : i + 3;
      const std::string conv = "features." + std::to_string(i);
      blocks.push_back(
          {conv, {conv, "features." + std::to_string(i + 1)}, run_children(features_, i, end)});
      if (pool_follows) ++i;
    }
    blocks.push_back(
        {"classifier", {"classifier"}, run_children(classifier_, 0, classifier_->size())});
    return blocks;
  }

 private:
  torch::nn::Sequential features_{nullptr}, classifier_{nullptr};
};

}  // namespace

std::shared_ptr<ZooNetwork> make_cnn(const InputSpec& input, int64_t width, int64_t depth,
                                     double dropout) {
  if (input.height < 4 || input.width < 4) {
    throw ConfigError("model 'cnn' needs images of at least 4x4 pixels, got " +
                      std::to_string(input.height) + "x" + std::to_string(input.width));
  }
  return std::make_shared<Cnn>(input, width, depth, dropout);
}

}  // namespace loom::models
