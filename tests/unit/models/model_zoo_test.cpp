#include <gtest/gtest.h>

#include "loom/core/error.h"
#include "loom/models/model.h"

namespace loom::models {
namespace {

std::unique_ptr<Model> build(const std::string& name, InputSpec input) {
  ModelConfig config;
  config.name = name;
  return make_model(config, input);
}

const InputSpec kImageNet{3, 224, 224, 1000};

// The torchvision and timm reference counts for the ImageNet heads.
TEST(ModelZoo, ParameterCountsMatchTheReferenceArchitectures) {
  EXPECT_EQ(build("resnet18", kImageNet)->parameter_count(), 11689512);
  EXPECT_EQ(build("resnet50", kImageNet)->parameter_count(), 25557032);
  EXPECT_EQ(build("vit_tiny", kImageNet)->parameter_count(), 5717416);
}

TEST(ModelZoo, ResNetUsesTorchvisionParameterNames) {
  auto model = build("resnet18", {3, 32, 32, 10});
  std::vector<std::string> names;
  for (const auto& [name, p] : model->named_parameters()) names.push_back(name);
  EXPECT_EQ(names.front(), "conv1.weight");
  EXPECT_NE(std::find(names.begin(), names.end(), "layer2.0.downsample.0.weight"), names.end());
  EXPECT_EQ(names.back(), "fc.bias");
  std::vector<std::string> buffers;
  for (const auto& [name, b] : model->named_buffers()) buffers.push_back(name);
  EXPECT_NE(std::find(buffers.begin(), buffers.end(), "bn1.running_mean"), buffers.end());
}

TEST(ModelZoo, EveryModelMapsABatchToLogits) {
  struct Case {
    std::string name;
    InputSpec input;
    bool convolutional;
  };
  for (const auto& c : std::vector<Case>{{"mlp", {1, 28, 28, 10}, false},
                                         {"cnn", {1, 28, 28, 10}, true},
                                         {"resnet18", {1, 28, 28, 10}, true},
                                         {"resnet50", {3, 32, 32, 7}, true},
                                         {"vit_tiny", {3, 32, 32, 5}, false}}) {
    ModelConfig config;
    config.name = c.name;
    config.patch_size = 8;
    auto model = make_model(config, c.input);
    at::Tensor x = at::randn({2, c.input.channels, c.input.height, c.input.width});
    at::Tensor y = model->forward(x);
    EXPECT_EQ(y.sizes(), (at::IntArrayRef{2, c.input.classes})) << c.name;
    EXPECT_TRUE(y.isfinite().all().item<bool>()) << c.name;
    EXPECT_EQ(model->is_convolutional(), c.convolutional) << c.name;
    y.sum().backward();
    for (const auto& [name, p] : model->named_parameters()) {
      ASSERT_TRUE(p.grad().defined()) << c.name << " " << name << " received no gradient";
    }
  }
}

TEST(ModelZoo, ChannelsLastKeepsValues) {
  auto model = build("cnn", {1, 28, 28, 10});
  model->train(false);
  at::Tensor x = at::randn({3, 1, 28, 28});
  at::Tensor before = model->forward(x);
  model->set_memory_format(at::MemoryFormat::ChannelsLast);
  for (const auto& [name, p] : model->named_parameters()) {
    if (p.dim() == 4) {
      EXPECT_TRUE(p.is_contiguous(at::MemoryFormat::ChannelsLast)) << name;
    }
  }
  at::Tensor after = model->forward(x.contiguous(at::MemoryFormat::ChannelsLast));
  EXPECT_TRUE(at::allclose(before, after, 1e-4, 1e-5));
}

TEST(ModelZoo, ViTPatchMustDivideTheImage) {
  ModelConfig config;
  config.name = "vit_tiny";
  try {
    make_model(config, {1, 28, 28, 10});
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "config key 'model.patch_size': 16 does not divide the input size 28x28");
  }
}

}  // namespace
}  // namespace loom::models
