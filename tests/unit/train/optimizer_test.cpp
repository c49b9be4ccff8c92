#include "loom/train/optimizer.h"

#include <gtest/gtest.h>

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
