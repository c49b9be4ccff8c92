// A model moved to another device trains there: nothing a pass makes along the way (a causal
// mask, rotary tables, positions, dropout masks) is left on the CPU. Where a GPU is present every
// zoo model runs there too and is compared with the CPU.
#include <ATen/Context.h>
#include <gtest/gtest.h>

#include <limits>

#include "loom/core/device.h"
#include "loom/models/draw_key.h"
#include "loom/models/gpt_layers.h"
#include "loom/models/model.h"
#include "loom/models/rotary.h"

namespace loom::models {
namespace {

struct Case {
  std::string name;
  InputSpec input;
};

std::vector<Case> zoo() {
  InputSpec tokens;
  tokens.classes = 64;
  tokens.seq_len = 16;
  tokens.task = Task::kLanguageModel;
  return {{"mlp", {1, 28, 28, 10}},     {"cnn", {1, 28, 28, 10}}, {"resnet18", {3, 32, 32, 10}},
          {"vit_tiny", {3, 32, 32, 5}}, {"gpt", tokens},          {"llama", tokens}};
}

std::unique_ptr<Model> build(const Case& c, double dropout) {
  at::manual_seed(7);
  ModelConfig config;
  config.name = c.name;
  config.patch_size = 8;
  config.gpt.dropout = dropout;
  config.dropout = dropout;
  return make_model(config, c.input);
}

at::Tensor batch_for(const InputSpec& input, int64_t samples) {
  at::manual_seed(11);
  if (input.task == Task::kLanguageModel) {
    return at::randint(input.classes, {samples, input.seq_len}, at::kLong);
  }
  return at::randn({samples, input.channels, input.height, input.width});
}

// One forward and backward of the model on `device`, its dropout masks keyed as a training step
// keys them; returns the output.
at::Tensor forward_backward(Model& model, const at::Tensor& input, at::Device device) {
  model.to(device);
  model.train(true);
  SampleKeys keys;
  keys.key = 42;
  const DrawKeyScope keyed(keys);
  const at::Tensor out = model.forward(input.to(device));
  out.to(at::kFloat).square().sum().backward();
  return out;
}

// What a model makes inside a pass is made on its input's device. The meta device stands in for a
// GPU here: ATen refuses to mix meta and CPU tensors as it refuses CUDA and CPU ones. (A whole
// model cannot go there: parameters move in place, which ATen allows only between devices that
// hold memory.)
TEST(ModelDevice, RotaryTablesFollowTheHeadsDevice) {
  Rotary rotary(8, 10000, RopeScaling{});
  const at::Tensor heads = at::randn({1, 2, 4, 8});
  const at::Tensor on_cpu = rotary.apply(heads, 3);
  EXPECT_EQ(rotary.apply(heads.to(at::kMeta), 3).device(), at::Device(at::kMeta));
  EXPECT_EQ(rotary.apply(heads.to(at::kMeta), 0).sizes(), heads.sizes());
  // Back on the CPU, the same angles as before.
  EXPECT_TRUE(at::equal(rotary.apply(heads, 3), on_cpu));
}

TEST(ModelDevice, CausalMasksFollowTheScoresDevice) {
  gpt::CausalMask mask(8);
  const at::Tensor on_cpu = mask.first(5, at::kFloat, at::kCPU).clone();
  EXPECT_EQ(mask.first(5, at::kFloat, at::kMeta).device(), at::Device(at::kMeta));
  EXPECT_EQ(mask.first(5, at::kBFloat16, at::kMeta).scalar_type(), at::kBFloat16);
  EXPECT_TRUE(at::equal(mask.first(5, at::kFloat, at::kCPU), on_cpu));
  EXPECT_TRUE(at::equal(on_cpu, at::full({5, 5}, -std::numeric_limits<float>::infinity()).triu(1)));
}

TEST(ModelDevice, KeyedDropoutMasksAreMadeOnTheTensorsDevice) {
  SampleKeys keys;
  keys.key = 42;
  const DrawKeyScope keyed(keys);
  const at::Tensor mask =
      dropout_mask({3, 5}, 0.5, at::TensorOptions().dtype(at::kBFloat16).device(at::kMeta));
  EXPECT_EQ(mask.device(), at::Device(at::kMeta));
  EXPECT_EQ(mask.scalar_type(), at::kBFloat16);
}

TEST(ModelDevice, OnAGpuEveryZooModelComputesWhatItDoesOnTheCpu) {
  if (cuda_availability().devices == 0) {
    GTEST_SKIP() << "no CUDA device: " << cuda_availability().why_not;
  }
  const at::Device gpu(at::kCUDA, 0);
  // cuDNN's convolutions take TF32 by default (10-bit mantissas): compare fp32 with fp32.
  at::globalContext().setAllowTF32CuDNN(false);
  for (const Case& c : zoo()) {
    const std::unique_ptr<Model> on_cpu = build(c, 0), on_gpu = build(c, 0);
    const at::Tensor input = batch_for(c.input, 2);
    const at::Tensor expected = forward_backward(*on_cpu, input, at::kCPU);
    const at::Tensor out = forward_backward(*on_gpu, input, gpu);
    EXPECT_TRUE(at::allclose(out.cpu(), expected, 1e-3, 1e-4)) << c.name;
    const auto cpu_params = on_cpu->named_parameters(), gpu_params = on_gpu->named_parameters();
    for (size_t i = 0; i < cpu_params.size(); ++i) {
      EXPECT_TRUE(
          at::allclose(gpu_params[i].second.grad().cpu(), cpu_params[i].second.grad(), 1e-3, 1e-4))
          << c.name << " " << cpu_params[i].first;
    }
  }
}

}  // namespace
}  // namespace loom::models
