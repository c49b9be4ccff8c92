// Tensor plans (models/tensor_plan.h) and the layers they split (models/planned_layers.h): the
// layers start as torch's own would, a plan names modules by pattern and cuts what its styles
// say, a plan that does not fit the model is refused under parallel.tensor with the pattern, and
// a model without a plan (or a sequence split) is refused by key.
#include "loom/models/tensor_plan.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <thread>

#include "loom/core/error.h"
#include "loom/models/model.h"
#include "loom/models/module_model.h"
#include "loom/models/planned_layers.h"
#include "unit/models/thread_tensor_groups.h"

namespace loom::models {
namespace {

// A two-layer MLP and a LayerNorm after it, written with planned layers; its plan is the test's.
class PlannedMlp : public ZooNetwork {
 public:
  explicit PlannedMlp(TensorPlan plan) : plan_(std::move(plan)) {
    up = register_module("up", std::make_shared<Linear>(4, 8));
    norm = register_module("norm", std::make_shared<LayerNorm>(4));
    down = register_module("down", std::make_shared<Linear>(8, 4));
  }
  std::vector<BlockSpec> block_specs() override {
    return {{"all", {"up", "norm", "down"}, [this](const at::Tensor& x) {
               return norm->forward(down->forward(at::gelu(up->forward(x))));
             }}};
  }
  TensorPlan tensor_plan() const override { return plan_; }

  std::shared_ptr<Linear> up, down;
  std::shared_ptr<LayerNorm> norm;

 private:
  TensorPlan plan_;
};

TensorPlan megatron_mlp() {
  TensorPlan plan;
  plan.styles = {{"up", colwise()}, {"down", rowwise()}};
  plan.divisors = {{8, "the 8 hidden features", false, ""}};
  return plan;
}

// A group of one size that sums nothing (a plan's cuts need no collective).
class SizedGroup : public TensorGroup {
 public:
  SizedGroup(int rank, int size, bool sequence = false)
      : rank_(rank), size_(size), sequence_(sequence) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void sum(at::Tensor&) override { FAIL() << "a split sums nothing"; }
  bool splits_sequence() const override { return sequence_; }

 private:
  int rank_, size_;
  bool sequence_;
};

ConfigError refusal(Model& model, TensorGroup& group) {
  try {
    apply_tensor_plan(model, group);
  } catch (const ConfigError& e) {
    return e;
  }
  ADD_FAILURE() << "the plan applied";
  return ConfigError("none");
}

TEST(TensorPlan, LayersStartFromTorchsOwnDraws) {
  at::manual_seed(3);
  const torch::nn::Linear linear(torch::nn::LinearOptions(5, 7));
  const torch::nn::Embedding embedding(11, 6);
  at::manual_seed(3);
  const Linear planned_linear(5, 7);
  const Embedding planned_embedding(11, 6);
  EXPECT_TRUE(torch::equal(planned_linear.weight, linear->weight));
  EXPECT_TRUE(torch::equal(planned_linear.bias, linear->bias));
  EXPECT_TRUE(torch::equal(planned_embedding.weight, embedding->weight));
  LayerNorm norm(6, 1e-6);
  const at::Tensor x = torch::randn({2, 3, 6});
  torch::nn::LayerNorm reference(torch::nn::LayerNormOptions({6}).eps(1e-6));
  EXPECT_TRUE(torch::allclose(norm.forward(x), reference->forward(x)));
}

TEST(TensorPlan, PatternsMatchWholeNamesDotsIncluded) {
  EXPECT_TRUE(name_matches("h.*.attn.c_attn", "h.11.attn.c_attn"));
  EXPECT_TRUE(name_matches("h.*.ln_*", "h.0.ln_2"));
  EXPECT_TRUE(name_matches("*proj", "h.0.mlp.c_proj"));
  EXPECT_FALSE(name_matches("h.*.attn", "h.0.attn.c_attn"));  // the whole name
  EXPECT_FALSE(name_matches("h.?.mlp", "h.10.mlp"));
}

TEST(TensorPlan, CutsWhatItsStylesSayAndTheSlicesRunAsTheWhole) {
  const auto made = [] {
    at::manual_seed(4);
    return std::make_unique<ModuleModel>("planned", std::make_shared<PlannedMlp>(megatron_mlp()),
                                         false);
  };
  const auto whole = made();
  const at::Tensor x = torch::randn({3, 4});
  const at::Tensor want = whole->forward(x);
  EXPECT_EQ(planned_split_parameter_count(*whole, 2), 8 * 4 + 8 + 4 * 8);  // up's, down's weight
  ThreadGroups pair(2);
  std::unique_ptr<ModuleModel> split[2] = {made(), made()};
  AppliedTensorPlan applied[2];
  at::Tensor got[2];
  std::vector<std::thread> ranks;
  for (int k = 0; k < 2; ++k) {
    ranks.emplace_back([&, k] {
      ThreadGroups::Group group(pair, k);
      applied[k] = apply_tensor_plan(*split[k], group);
      torch::NoGradGuard no_grad;
      got[k] = split[k]->forward(x);
    });
  }
  for (auto& rank : ranks) rank.join();
  const auto all = whole->named_parameters();
  for (int k = 0; k < 2; ++k) {
    SCOPED_TRACE("rank " + std::to_string(k));
    EXPECT_TRUE(torch::allclose(got[k], want, 1e-5, 1e-6));
    EXPECT_FALSE(applied[k].output_split);
    ASSERT_EQ(applied[k].splits.size(), 3u);
    EXPECT_EQ(applied[k].splits.at("up.weight").dim, 0);
    EXPECT_EQ(applied[k].splits.at("up.bias").dim, 0);
    EXPECT_EQ(applied[k].splits.at("down.weight").dim, 1);
    const auto mine = split[k]->named_parameters();
    for (std::size_t i = 0; i < all.size(); ++i) {
      const auto it = applied[k].splits.find(all[i].first);
      const at::Tensor expected =
          it == applied[k].splits.end() ? all[i].second : slice_of(all[i].second, it->second, k, 2);
      EXPECT_TRUE(torch::equal(mine[i].second, expected)) << all[i].first;
    }
  }
}

TEST(TensorPlan, APlanThatDoesNotFitTheModelIsRefusedWithItsPattern) {
  SizedGroup two(0, 2);
  TensorPlan nothing = megatron_mlp();
  nothing.styles.push_back({"h.*.attn", colwise()});
  ModuleModel a("planned", std::make_shared<PlannedMlp>(nothing), false);
  ConfigError e = refusal(a, two);
  EXPECT_EQ(e.key(), "parallel.tensor");
  EXPECT_EQ(e.field("pattern"), "h.*.attn");

  TensorPlan wrong = megatron_mlp();
  wrong.styles.push_back({"norm", rowwise()});  // a LayerNorm takes only sequence
  ModuleModel b("planned", std::make_shared<PlannedMlp>(wrong), false);
  e = refusal(b, two);
  EXPECT_EQ(e.field("pattern"), "norm");

  TensorPlan twice = megatron_mlp();
  twice.styles.push_back({"*", colwise()});
  ModuleModel c("planned", std::make_shared<PlannedMlp>(twice), false);
  e = refusal(c, two);
  EXPECT_EQ(e.field("pattern"), "*");
}

TEST(TensorPlan, SizesThePlansCountsDoNotDivideAreRefusedWithWhatWould) {
  SizedGroup three(0, 3);
  ModuleModel model("planned", std::make_shared<PlannedMlp>(megatron_mlp()), false);
  const ConfigError e = refusal(model, three);
  EXPECT_EQ(e.key(), "parallel.tensor");
  EXPECT_EQ(e.field("value"), "3");
  EXPECT_EQ(e.field("allowed"), "1, 2, 4 or 8");
}

TEST(TensorPlan, AModelWithoutAPlanOrASequenceSplitIsRefusedByKey) {
  SizedGroup two(0, 2), by_sequence(0, 2, /*sequence=*/true);
  ModuleModel none("plain", std::make_shared<PlannedMlp>(TensorPlan{}), false);
  EXPECT_EQ(refusal(none, two).key(), "parallel.tensor");
  ModuleModel no_sequence("planned", std::make_shared<PlannedMlp>(megatron_mlp()), false);
  EXPECT_EQ(refusal(no_sequence, by_sequence).key(), "parallel.tensor_sequence");
  EXPECT_EQ(planned_split_parameter_count(none, 2), 0);
}

}  // namespace
}  // namespace loom::models
