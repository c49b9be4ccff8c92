#include "loom/train/optimizer.h"

#include <gtest/gtest.h>
#include <torch/optim/sgd.h>

#include "loom/train/fused_sgd.h"

namespace loom::train {
namespace {

models::NamedTensors make_params() {
  at::manual_seed(3);
  return {
      {"w", at::randn({3, 2, 2, 2}).contiguous(at::MemoryFormat::ChannelsLast).requires_grad_()},
      {"b", at::randn({4}).requires_grad_()}};
}

void step_with_grads(torch::optim::Optimizer& opt, const models::NamedTensors& params, int seed) {
  opt.zero_grad();
  at::manual_seed(seed);
  for (const auto& [name, p] : params) p.mutable_grad() = at::randn_like(p);
  opt.step();
}

models::NamedTensors clone_params(const models::NamedTensors& params) {
  models::NamedTensors out;
  for (const auto& [n, p] : params) out.emplace_back(n, p.detach().clone().requires_grad_());
  return out;
}

class OptimizerState : public ::testing::TestWithParam<std::string> {};

// Restored state must make the next step bit-identical: that is what exact resume rests on.
TEST_P(OptimizerState, ExportImportContinuesBitIdentically) {
  OptimizerConfig cfg;
  cfg.name = GetParam();
  cfg.lr = 0.01;
  cfg.weight_decay = 0.01;
  models::NamedTensors original = make_params();
  auto opt = make_optimizer(cfg, original);
  for (int s = 0; s < 3; ++s) step_with_grads(*opt, original, s);

  models::NamedTensors state = export_optimizer_state(*opt, cfg.name, original);
  EXPECT_FALSE(state.empty());
  models::NamedTensors copy = clone_params(original);
  auto restored = make_optimizer(cfg, copy);
  import_optimizer_state(*restored, cfg.name, copy, state);

  step_with_grads(*opt, original, 10);
  step_with_grads(*restored, copy, 10);
  for (size_t i = 0; i < original.size(); ++i) {
    EXPECT_TRUE(original[i].second.equal(copy[i].second)) << cfg.name << " " << original[i].first;
  }
}

INSTANTIATE_TEST_SUITE_P(AllKinds, OptimizerState, ::testing::Values("sgd", "adam", "adamw"));

TEST(Optimizer, SetLearningRateReachesEveryGroup) {
  OptimizerConfig cfg;
  models::NamedTensors params = make_params();
  auto opt = make_optimizer(cfg, params);
  set_learning_rate(*opt, 0.125);
  for (auto& g : opt->param_groups()) EXPECT_DOUBLE_EQ(g.options().get_lr(), 0.125);
}

TEST(Optimizer, MissingStateIsNamed) {
  OptimizerConfig cfg;
  cfg.name = "adam";
  models::NamedTensors params = make_params();
  auto opt = make_optimizer(cfg, params);
  models::NamedTensors partial = {{"w.step", at::scalar_tensor(1, at::kLong)}};
  try {
    import_optimizer_state(*opt, "adam", params, partial);
    FAIL();
  } catch (const std::exception& e) {
    EXPECT_STREQ(e.what(), "checkpoint: optimizer state 'w.exp_avg' is missing");
  }
}

}  // namespace
}  // namespace loom::train

namespace loom::train {
namespace {

// Runs `steps` updates of the same parameters and gradients through LibTorch's SGD and
// FusedSGD; returns the largest difference of the parameters.
double fused_vs_libtorch(const torch::optim::SGDOptions& options, at::MemoryFormat format) {
  at::manual_seed(3);
  std::vector<at::Tensor> init = {at::randn({8, 3, 5, 5}).contiguous(format), at::randn({100}),
                                  at::randn({7, 13})};
  std::vector<at::Tensor> a, b;
  for (const auto& t : init) {
    a.push_back(t.clone().set_requires_grad(true));
    b.push_back(t.clone().set_requires_grad(true));
  }
  torch::optim::SGD reference(a, options);
  FusedSGD fused(b, options);
  for (int step = 0; step < 4; ++step) {
    for (std::size_t i = 0; i < init.size(); ++i) {
      const auto g = at::randn(init[i].sizes()).contiguous(init[i].suggest_memory_format());
      a[i].mutable_grad() = g.clone();
      b[i].mutable_grad() = g.clone();
    }
    reference.step();
    fused.step();
  }
  double worst = 0;
  for (std::size_t i = 0; i < init.size(); ++i) {
    worst = std::max(worst, (a[i] - b[i]).abs().max().item<double>());
  }
  return worst;
}

TEST(FusedSgd, MatchesLibTorchSgd) {
  using torch::optim::SGDOptions;
  const SGDOptions cases[] = {SGDOptions(0.1),
                              SGDOptions(0.05).momentum(0.9).nesterov(true).weight_decay(5e-4),
                              SGDOptions(0.05).momentum(0.9).dampening(0.1).weight_decay(1e-2),
                              SGDOptions(0.2).momentum(0.5)};
  for (const auto& options : cases) {
    EXPECT_LT(fused_vs_libtorch(options, at::MemoryFormat::Contiguous), 1e-6);
    EXPECT_LT(fused_vs_libtorch(options, at::MemoryFormat::ChannelsLast), 1e-6);
  }
}

}  // namespace
}  // namespace loom::train
