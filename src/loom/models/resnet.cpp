#include "loom/models/resnet.h"

#include <torch/nn/init.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/pooling.h>

#include "loom/core/error.h"

namespace loom::models {
namespace {

using torch::nn::BatchNorm2d;
using torch::nn::Conv2d;
using torch::nn::Conv2dOptions;
using torch::nn::Sequential;

Conv2d conv(int64_t in, int64_t out, int64_t kernel, int64_t stride) {
  return Conv2d(Conv2dOptions(in, out, kernel).stride(stride).padding(kernel / 2).bias(false));
}

// A residual block: `body` computes the residual, `downsample` (when present) matches the
// identity's shape.
class Block : public torch::nn::Module {
 public:
  Block(int64_t in, int64_t planes, int64_t stride, bool bottleneck) {
    const int64_t expansion = bottleneck ? 4 : 1;
    if (bottleneck) {
      conv1_ = register_module("conv1", conv(in, planes, 1, 1));
      bn1_ = register_module("bn1", BatchNorm2d(planes));
      conv2_ = register_module("conv2", conv(planes, planes, 3, stride));
      bn2_ = register_module("bn2", BatchNorm2d(planes));
      conv3_ = register_module("conv3", conv(planes, planes * expansion, 1, 1));
      bn3_ = register_module("bn3", BatchNorm2d(planes * expansion));
    } else {
      conv1_ = register_module("conv1", conv(in, planes, 3, stride));
      bn1_ = register_module("bn1", BatchNorm2d(planes));
      conv2_ = register_module("conv2", conv(planes, planes, 3, 1));
      bn2_ = register_module("bn2", BatchNorm2d(planes));
    }
    if (stride != 1 || in != planes * expansion) {
      downsample_ = register_module(
          "downsample",
          Sequential(conv(in, planes * expansion, 1, stride), BatchNorm2d(planes * expansion)));
    }
  }

  at::Tensor forward(const at::Tensor& x) {
    at::Tensor out = bn1_->forward(conv1_->forward(x)).relu_();
    out = bn2_->forward(conv2_->forward(out));
    if (conv3_) out = bn3_->forward(conv3_->forward(out.relu_()));
    at::Tensor identity = downsample_ ? downsample_->forward(x) : x;
    return out.add_(identity).relu_();
  }

 private:
  Conv2d conv1_{nullptr}, conv2_{nullptr}, conv3_{nullptr};
  BatchNorm2d bn1_{nullptr}, bn2_{nullptr}, bn3_{nullptr};
  Sequential downsample_{nullptr};
};

class ResNet : public ZooNetwork {
 public:
  ResNet(const InputSpec& in, const std::vector<int64_t>& blocks, bool bottleneck) {
    const int64_t expansion = bottleneck ? 4 : 1;
    conv1_ = register_module("conv1", conv(in.channels, 64, 7, 2));
    bn1_ = register_module("bn1", BatchNorm2d(64));
    int64_t channels = 64;
    for (size_t stage = 0; stage < 4; ++stage) {
      const int64_t planes = int64_t{64} << stage;
      Sequential layer;
      for (int64_t b = 0; b < blocks[stage]; ++b) {
        const int64_t stride = (stage > 0 && b == 0) ? 2 : 1;
        layer->push_back(std::make_shared<Block>(channels, planes, stride, bottleneck));
        channels = planes * expansion;
      }
      layers_.push_back(register_module("layer" + std::to_string(stage + 1), layer));
    }
    fc_ = register_module("fc", torch::nn::Linear(channels, in.classes));
    initialise();
  }

  // The stem, every residual block, the head.
  std::vector<BlockSpec> block_specs() override {
    std::vector<BlockSpec> blocks;
    blocks.push_back({"stem", {"conv1", "bn1"}, [this](const at::Tensor& x) {
                        at::Tensor y = bn1_->forward(conv1_->forward(x)).relu_();
                        return at::max_pool2d(y, {3, 3}, {2, 2}, {1, 1});
                      }});
    for (size_t stage = 0; stage < layers_.size(); ++stage) {
      for (size_t b = 0; b < layers_[stage]->size(); ++b) {
        const std::string name = "layer" + std::to_string(stage + 1) + "." + std::to_string(b);
        blocks.push_back({name, {name}, run_children(layers_[stage], b, b + 1)});
      }
    }
    blocks.push_back({"head", {"fc"}, [this](const at::Tensor& x) {
                        return fc_->forward(at::adaptive_avg_pool2d(x, {1, 1}).flatten(1));
                      }});
    return blocks;
  }

 private:
  // torchvision: Kaiming-normal (fan_out, ReLU) convolutions, unit/zero batch norm.
  void initialise() {
    for (auto& module : modules(/*include_self=*/false)) {
      if (auto* c = module->as<torch::nn::Conv2d>()) {
        torch::nn::init::kaiming_normal_(c->weight, 0.0, torch::kFanOut, torch::kReLU);
      } else if (auto* bn = module->as<torch::nn::BatchNorm2d>()) {
        torch::nn::init::ones_(bn->weight);
        torch::nn::init::zeros_(bn->bias);
      }
    }
  }

  Conv2d conv1_{nullptr};
  BatchNorm2d bn1_{nullptr};
  std::vector<Sequential> layers_;
  torch::nn::Linear fc_{nullptr};
};

}  // namespace

std::shared_ptr<ZooNetwork> make_resnet(const InputSpec& input, int depth) {
  if (depth == 18) return std::make_shared<ResNet>(input, std::vector<int64_t>{2, 2, 2, 2}, false);
  if (depth == 50) return std::make_shared<ResNet>(input, std::vector<int64_t>{3, 4, 6, 3}, true);
  throw ConfigError("resnet depth must be 18 or 50, got " + std::to_string(depth));
}

}  // namespace loom::models
