#include "loom/train/optimizer.h"

#include <gtest/gtest.h>
#include <torch/optim/sgd.h>

#include "loom/core/error.h"
#include "loom/train/fused_adam.h"
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

// Another program's optimizer (a Python script's torch.optim) gets its state named as Loom's
// own is: split and named again, export_optimizer_state's tensors come back under their names.
TEST_P(OptimizerState, SplitAndNamedAgainIsWhatExportGives) {
  OptimizerConfig cfg;
  cfg.name = GetParam();
  cfg.momentum = 0.9;
  models::NamedTensors params = make_params();
  auto opt = make_optimizer(cfg, params);
  step_with_grads(*opt, params, 1);
  const models::NamedTensors state = export_optimizer_state(*opt, cfg.name, params);

  const ParameterStates split = split_optimizer_state(cfg.name, state);
  ASSERT_EQ(split.size(), params.size());
  for (size_t i = 0; i < split.size(); ++i) {
    EXPECT_EQ(split[i].first, params[i].first);
    EXPECT_EQ(split[i].second.size(), optimizer_state_fields(cfg.name).size());
  }
  const models::NamedTensors named = name_optimizer_state(cfg.name, split);
  ASSERT_EQ(named.size(), state.size());
  for (size_t i = 0; i < named.size(); ++i) {
    EXPECT_EQ(named[i].first, state[i].first);
    EXPECT_TRUE(named[i].second.equal(state[i].second)) << named[i].first;
  }
}

INSTANTIATE_TEST_SUITE_P(AllKinds, OptimizerState, ::testing::Values("sgd", "adam", "adamw"));

TEST(Optimizer, ForeignStateIsNamedAsLoomsWithItsStepCountAnInteger) {
  const at::Tensor moment = at::ones({2});
  const ParameterStates torch_adam = {
      {"head.weight", {{"step", at::scalar_tensor(3.0)}, {"exp_avg", moment}}}};
  const models::NamedTensors named = name_optimizer_state("adamw", torch_adam);
  ASSERT_EQ(named.size(), 2u);
  EXPECT_EQ(named[0].first, "head.weight.step");
  EXPECT_EQ(named[0].second.scalar_type(), at::kLong);
  EXPECT_EQ(named[0].second.item<int64_t>(), 3);
  EXPECT_EQ(named[1].first, "head.weight.exp_avg");

  const ParameterStates amsgrad = {{"head.weight", {{"max_exp_avg_sq", moment}}}};
  try {
    name_optimizer_state("adam", amsgrad);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("'max_exp_avg_sq'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(split_optimizer_state("sgd", {{"head.weight.exp_avg", moment}}), DataError);
}

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

// Runs 4 updates of the same parameters and gradients through LibTorch's optimizer and Loom's
// fused one; returns the largest difference of the parameters and of their state (under the names
// a checkpoint gives it).
template <typename Reference, typename Fused, typename Options>
double fused_vs_libtorch(const Options& options, at::MemoryFormat format, const std::string& kind) {
  at::manual_seed(3);
  std::vector<at::Tensor> init = {at::randn({8, 3, 5, 5}).contiguous(format), at::randn({100}),
                                  at::randn({7, 13})};
  std::vector<at::Tensor> a, b;
  for (const auto& t : init) {
    a.push_back(t.clone().set_requires_grad(true));
    b.push_back(t.clone().set_requires_grad(true));
  }
  Reference reference(a, options);
  Fused fused(b, options);
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
  models::NamedTensors named_a, named_b;
  for (std::size_t i = 0; i < init.size(); ++i) {
    worst = std::max(worst, (a[i] - b[i]).abs().max().item<double>());
    named_a.emplace_back("p" + std::to_string(i), a[i]);
    named_b.emplace_back("p" + std::to_string(i), b[i]);
  }
  const auto state_a = export_optimizer_state(reference, kind, named_a);
  const auto state_b = export_optimizer_state(fused, kind, named_b);
  EXPECT_EQ(state_a.size(), state_b.size());
  for (std::size_t i = 0; i < std::min(state_a.size(), state_b.size()); ++i) {
    EXPECT_EQ(state_a[i].first, state_b[i].first);
    const at::Tensor difference =
        state_a[i].second.to(at::kDouble) - state_b[i].second.to(at::kDouble);
    worst = std::max(worst, difference.abs().max().item().toDouble());
  }
  return worst;
}

// FusedSGD sending CPU parameters to torch's fused kernel, as it sends CUDA ones.
class FusedSgdThroughTorchsKernel : public FusedSGD {
 public:
  FusedSgdThroughTorchsKernel(const std::vector<at::Tensor>& params,
                              const torch::optim::SGDOptions& options)
      : FusedSGD(params, options) {
    use_torch_kernel_on_cpu(true);
  }
};

// Loom's loop, and torch's fused kernel (the path of parameters on a GPU), step as LibTorch's SGD.
TEST(FusedSgd, MatchesLibTorchSgd) {
  using torch::optim::SGDOptions;
  const SGDOptions cases[] = {SGDOptions(0.1),
                              SGDOptions(0.05).momentum(0.9).nesterov(true).weight_decay(5e-4),
                              SGDOptions(0.05).momentum(0.9).dampening(0.1).weight_decay(1e-2),
                              SGDOptions(0.2).momentum(0.5)};
  for (const auto& options : cases) {
    for (auto format : {at::MemoryFormat::Contiguous, at::MemoryFormat::ChannelsLast}) {
      EXPECT_LT((fused_vs_libtorch<torch::optim::SGD, FusedSGD>(options, format, "sgd")), 1e-6);
      EXPECT_LT((fused_vs_libtorch<torch::optim::SGD, FusedSgdThroughTorchsKernel>(options, format,
                                                                                   "sgd")),
                1e-6);
    }
  }
}

TEST(FusedAdam, MatchesLibTorchAdamAndAdamW) {
  using torch::optim::AdamOptions;
  using torch::optim::AdamWOptions;
  for (auto format : {at::MemoryFormat::Contiguous, at::MemoryFormat::ChannelsLast}) {
    for (const auto& options : {AdamOptions(0.01), AdamOptions(0.003).weight_decay(0.1),
                                AdamOptions(0.01).betas({0.8, 0.95}).eps(1e-6)}) {
      EXPECT_LT((fused_vs_libtorch<torch::optim::Adam, FusedAdam>(options, format, "adam")), 1e-6);
    }
    for (const auto& options : {AdamWOptions(0.01), AdamWOptions(0.003).weight_decay(0.1),
                                AdamWOptions(0.01).betas({0.8, 0.95}).weight_decay(0)}) {
      EXPECT_LT((fused_vs_libtorch<torch::optim::AdamW, FusedAdamW>(options, format, "adamw")),
                1e-6);
    }
  }
  // amsgrad is LibTorch's own step, the same state.
  EXPECT_LT((fused_vs_libtorch<torch::optim::AdamW, FusedAdamW>(
                AdamWOptions(0.01).amsgrad(true), at::MemoryFormat::Contiguous, "adamw")),
            1e-7);
}

}  // namespace
}  // namespace loom::train
