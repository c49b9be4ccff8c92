// Activation recompute: blocks that run their forward again in backward give the gradients the
// plain blocks give, dropout included, and keep fewer activations.
#include "loom/models/recompute.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "loom/core/device.h"
#include "loom/models/gpt.h"
#include "loom/models/token_cross_entropy_loss.h"

namespace loom::models {
namespace {

// The loss of the chain of `blocks` on `ids`, with every parameter's gradient, from `seed`.
std::vector<at::Tensor> gradients(ModuleModel& model, const std::vector<Block>& blocks,
                                  const at::Tensor& ids, const at::Tensor& targets, double& loss) {
  for (auto& [name, p] : model.named_parameters()) p.mutable_grad().reset();
  at::manual_seed(7);  // dropout's draws
  at::Tensor x = ids;
  for (const Block& b : blocks) x = b.forward(x);
  const at::Tensor l = TokenCrossEntropyLoss()(x, targets);
  loss = l.item<double>();
  l.backward();
  std::vector<at::Tensor> grads;
  for (auto& [name, p] : model.named_parameters()) grads.push_back(p.grad().clone());
  return grads;
}

// torch's dropout draws from the generator of the device it runs on: a recomputed block there
// replays that generator's draws.
void expect_plain_gradients_dropout_included(const at::Device& device) {
  at::manual_seed(0);
  const GptConfig c{2, 2, 16, 8, 50, 0.2, false};
  ModuleModel model("gpt", make_gpt(c), false);
  model.to(device);
  const at::Tensor ids = at::randint(0, c.vocab, {3, c.seq_len}, at::kLong).to(device);
  const at::Tensor targets = at::randint(0, c.vocab, {3, c.seq_len}, at::kLong).to(device);
  std::vector<at::Tensor> weights;
  for (auto& [name, p] : model.named_parameters()) weights.push_back(p);
  std::vector<Block> plain = model.blocks(), again;
  for (const Block& b : plain) again.push_back(recomputed(b, weights));

  double plain_loss = 0, again_loss = 0;
  const auto expected = gradients(model, plain, ids, targets, plain_loss);
  const auto got = gradients(model, again, ids, targets, again_loss);
  EXPECT_EQ(plain_loss, again_loss);
  const NamedTensors named = model.named_parameters();
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_TRUE(at::allclose(got[i], expected[i], 1e-6, 1e-7)) << named[i].first;
    EXPECT_GT(expected[i].abs().sum().item<double>(), 0) << named[i].first;
  }
  // The generator goes on as without recompute: the next draw is the same.
  const auto on_device = at::TensorOptions().device(device);
  at::manual_seed(7);
  at::Tensor x = ids;
  for (const Block& b : plain) x = b.forward(x);
  TokenCrossEntropyLoss()(x, targets).backward();
  const at::Tensor after_plain = at::rand({4}, on_device);
  at::manual_seed(7);
  x = ids;
  for (const Block& b : again) x = b.forward(x);
  TokenCrossEntropyLoss()(x, targets).backward();
  EXPECT_TRUE(at::equal(at::rand({4}, on_device), after_plain));
}

TEST(Recompute, GivesThePlainBlocksGradientsDropoutIncluded) {
  expect_plain_gradients_dropout_included(at::kCPU);
}

TEST(Recompute, OnAGpuReplaysItsGeneratorsDropout) {
  if (cuda_availability().devices == 0) {
    GTEST_SKIP() << "no CUDA device: " << cuda_availability().why_not;
  }
  expect_plain_gradients_dropout_included(at::Device(at::kCUDA, 0));
}

TEST(Recompute, TheGraphKeepsTheForwardAndTheBlocksOwnParametersTrain) {
  at::manual_seed(2);
  const GptConfig c{1, 2, 8, 4, 20, 0.0, false};
  ModuleModel model("gpt", make_gpt(c), false);
  const std::vector<Block> plain = model.blocks();
  const at::Tensor ids = at::randint(0, c.vocab, {2, 4}, at::kLong);
  at::Tensor x = plain[0].forward(ids);
  {
    // Recomputed with no other weights, and gone before backward.
    const Block layer = recomputed(plain[1], {});
    x = layer.forward(x);
  }
  x = plain[2].forward(x);
  TokenCrossEntropyLoss()(x, ids).backward();
  for (const auto& [name, p] : plain[1].parameters) {
    ASSERT_TRUE(p.grad().defined()) << name;
    EXPECT_GT(p.grad().abs().sum().item<double>(), 0) << name;
  }
}

TEST(Recompute, RunsAsItIsWithoutGradients) {
  at::manual_seed(1);
  const GptConfig c{1, 2, 8, 4, 20, 0.0, false};
  ModuleModel model("gpt", make_gpt(c), false);
  std::vector<at::Tensor> weights;
  for (auto& [name, p] : model.named_parameters()) weights.push_back(p);
  const at::Tensor ids = at::randint(0, c.vocab, {2, 4}, at::kLong);
  at::NoGradGuard no_grad;
  at::Tensor plain = ids, again = ids;
  for (const Block& b : model.blocks()) {
    plain = b.forward(plain);
    again = recomputed(b, weights).forward(again);
  }
  EXPECT_TRUE(at::equal(plain, again));
}

}  // namespace
}  // namespace loom::models
