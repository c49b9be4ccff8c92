// The stages a script's pipeline cuts its model into, and the chain of blocks it runs.
#include "loom/train/script_pipeline.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "loom/core/error.h"
#include "loom/models/block_chain_model.h"

namespace loom::train {
namespace {

std::string split_error(int blocks, int stages, const std::vector<int>& split) {
  try {
    stage_split(blocks, stages, split);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(ScriptPipeline, SplitsBlocksAsEvenlyAsTheyGo) {
  EXPECT_EQ(stage_split(10, 2, {}), (std::vector<int>{5, 5}));
  EXPECT_EQ(stage_split(10, 3, {}), (std::vector<int>{4, 3, 3}));
  EXPECT_EQ(stage_split(10, 4, {}), (std::vector<int>{3, 3, 2, 2}));
  EXPECT_EQ(stage_split(10, 2, {3, 7}), (std::vector<int>{3, 7}));
  try {
    stage_split(3, 4, {});
    ADD_FAILURE() << "3 blocks filled 4 stages";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.key(), "split");
    EXPECT_EQ(e.field("problem"), "too_few_blocks");
  }
  EXPECT_EQ(split_error(10, 2, {3, 6}).rfind("split:", 0), 0u);     // 9 of 10 blocks
  EXPECT_EQ(split_error(10, 3, {5, 5}).rfind("split:", 0), 0u);     // 2 of 3 stages
  EXPECT_EQ(split_error(10, 3, {5, 5, 0}).rfind("split:", 0), 0u);  // an empty stage
}

TEST(ScriptPipeline, AChainOfBlocksIsItsBlocksInOrder) {
  const at::Tensor w = at::full({1}, 3.0), b = at::full({1}, 1.0);
  std::vector<models::Block> blocks(2);
  blocks[0] = {"scale", [w](const at::Tensor& x) { return x * w; }, {{"scale.w", w}}, {}, {}};
  blocks[1] = {"shift", [b](const at::Tensor& x) { return x + b; }, {}, {{"shift.b", b}}, {}};
  bool training = true;
  models::BlockChainModel model("chain", blocks, [&](bool on) { training = on; });
  EXPECT_DOUBLE_EQ(model.forward(at::full({1}, 2.0)).item<double>(), 7.0);
  ASSERT_EQ(model.named_parameters().size(), 1u);
  EXPECT_EQ(model.named_parameters()[0].first, "scale.w");
  ASSERT_EQ(model.named_buffers().size(), 1u);
  EXPECT_EQ(model.named_buffers()[0].first, "shift.b");
  model.train(false);
  EXPECT_FALSE(training);
  EXPECT_THROW(models::BlockChainModel("empty", {}), ConfigError);
}

}  // namespace
}  // namespace loom::train
