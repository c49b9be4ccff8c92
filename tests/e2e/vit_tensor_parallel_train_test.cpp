// Tensor parallelism (parallel.tensor) for the zoo's ViT with `loom train`: each encoder block's
// attention split by its 3 heads and its MLP by the hidden width over a tensor group of 3. It
// must train like one process on the same global batch, and its checkpoints, which hold every
// tensor whole, move to and from one process.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "e2e/same_training.h"
#include "tools/run_compare.h"
#include "tools/test_support.h"

namespace loom::test {
namespace {

// vit_tiny on 16x16 synthetic images cut into 8x8 patches: 4 patches and the class token, so a
// step is mostly the 5.4M parameters' update. fp32, and SGD (Adam divides each gradient by its
// own running size, so rounding-error gradients step by the whole learning rate); clipping,
// which sums the norms of the ranks' slices.
std::string vit_args() {
  return " " + tiny_synthetic_args() +
         " --set model=vit_tiny --set model.patch_size=8 --set runtime.precision=fp32"
         " --set optimizer.name=sgd --set train.grad_clip=1 --set train.epochs=1"
         " --set train.max_steps=8 --set data.batch_size=8";
}
std::string launch(int ranks, const std::string& args) {
  return "launch --nproc-per-node " + std::to_string(ranks) + " -- " + test::loom_binary() +
         " train" + args;
}
const std::string kTensor3 = " --set parallel.tensor=3";

TEST(VitTensorParallelTrain, ThreeRanksTrainLikeOneProcess) {
  TempDir dir;
  const auto one = run_loom("train" + vit_args() + " --out " + (dir / "one"));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const auto split = run_loom(launch(3, vit_args() + kTensor3 + " --out " + (dir / "tp")));
  ASSERT_EQ(split.exit_code, 0) << split.output;
  expect_trained_alike(dir / "tp", dir / "one");
  const auto s = summary_of(dir / "tp");
  EXPECT_EQ(s["layout"]["mesh"], nlohmann::json({{"data", 1}, {"tensor", 3}})) << s["layout"];
  // Each rank holds a third of every block's matrices (99% of the parameters); the patch
  // embedding, class token, position table, LayerNorms, row-split biases and head stay whole.
  const double whole = summary_of(dir / "one")["memory"]["parameter_bytes"].get<double>();
  const double held = s["memory"]["parameter_bytes"].get<double>();
  EXPECT_LT(held, 0.36 * whole);
  EXPECT_GT(held, whole / 3);
  // The group's all-reduces are their own phase of the step; one process has none.
  EXPECT_GT(s["step_time"]["share"]["tensor_comm"].get<double>(), 0.0) << s["step_time"];
  EXPECT_EQ(summary_of(dir / "one")["step_time"]["share"]["tensor_comm"].get<double>(), 0.0);
  // The FLOPs are the model's count, not a rank's third of the products: the same as one
  // process's. 16x16 images in patches of 8: 4 patches and the class token.
  const auto& mfu = s["mfu"];
  EXPECT_EQ(mfu["basis"], "6 x the matrix products' multiply-adds per sample");
  const double d = 192, tokens = 5;
  const double per_sample =
      6 * (4 * 3 * 8 * 8 * d + 12 * (tokens * (4 * d * d + 2 * d * 768) + 2 * tokens * tokens * d) +
           d * 4);
  EXPECT_NEAR(mfu["training_flops_per_sample"].get<double>(), per_sample, 1e-6 * per_sample);
  EXPECT_EQ(summary_of(dir / "one")["mfu"]["training_flops_per_sample"],
            mfu["training_flops_per_sample"]);
}

// A tensor-parallel checkpoint holds every tensor whole under its name: one process goes on
// from it, and a tensor group of 3 from one process's. A constant schedule, so that a run
// stopped at step 4 takes the steps a run of 8 takes.
TEST(VitTensorParallelTrain, CheckpointsMoveBetweenATensorGroupAndOneProcess) {
  TempDir dir;
  const std::string args = vit_args() + " --set schedule.name=constant";
  const auto reference = run_loom("train" + args + " --out " + (dir / "one"));
  ASSERT_EQ(reference.exit_code, 0) << reference.output;
  const std::string half = " --set train.max_steps=4";
  expect_checkpoint_moves({{"to one process", launch(3, args + kTensor3 + half), "train" + args},
                           {"from one process", "train" + args + half, launch(3, args + kTensor3)}},
                          dir, dir / "one", 4);
}

TEST(VitTensorParallelTrain, RanksThatDoNotDivideTheThreeHeadsAreAConfigurationError) {
  TempDir dir;
  const auto r = run_loom(launch(2, vit_args() + " --set parallel.tensor=2 --out " + (dir / "tp")));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("parallel.tensor"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("heads"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace loom::test
