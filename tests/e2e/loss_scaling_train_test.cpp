// runtime.precision fp16: autocast to fp16 with the loss scaled (train/loss_scaler.h). ATen's CPU
// autocast computes fp16 too, so the scaler's whole path runs here: a step whose gradients
// overflow (LOOM_FAULT_OVERFLOW_RANK_AT_STEP backpropagates it from an infinite scale) is skipped
// by every rank and halves the scale, and checkpoints carry the scale so that a resumed run
// scales as the uninterrupted one.
#include <gtest/gtest.h>

#include <cmath>
#include <csignal>
#include <cstdio>
#include <string>

#include "loom/train/safetensors.h"
#include "tools/run_compare.h"
#include "tools/test_support.h"

namespace loom::test {
namespace {

// A small MLP on synthetic images, eight steps of SGD with momentum in fp16, a checkpoint after
// every step (all kept).
std::string fp16_args() {
  return " " + tiny_synthetic_args() +
         " --set model=mlp --set model.dropout=0 --set runtime.precision=fp16"
         " --set optimizer.momentum=0.9 --set train.max_steps=8 --set checkpoint.every_steps=1"
         " --set checkpoint.keep=10";
}

std::string step_file(const std::string& run, int step, const std::string& file) {
  char name[32];
  std::snprintf(name, sizeof name, "step-%08d", step);
  return run + "/checkpoints/" + name + "/" + file;
}

// Whether two checkpoints of a run hold the same tensors, bit for bit (the RNG states aside).
bool same_tensors(const std::string& run, int a, int b, const std::string& file) {
  const auto first = train::read_safetensors(step_file(run, a, file));
  const auto second = train::read_safetensors(step_file(run, b, file));
  if (first.size() != second.size()) return false;
  for (size_t i = 0; i < first.size(); ++i) {
    if (first[i].first.rfind("rng/", 0) == 0) continue;
    if (first[i].first != second[i].first || !first[i].second.equal(second[i].second)) {
      return false;
    }
  }
  return true;
}

TEST(LossScaling, AnOverflowingStepIsSkippedAndAResumedRunScalesAsTheUninterruptedOne) {
  TempDir dir;
  const std::string overflow = "LOOM_FAULT_OVERFLOW_RANK_AT_STEP=0:3";
  const std::string straight = dir / "straight";
  const auto run = run_loom("train --out " + straight + fp16_args(), overflow);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const auto summary = summary_of(straight);
  EXPECT_EQ(summary["precision"], "fp16");
  EXPECT_EQ(summary["mfu"]["peak_dtype"], "fp16");
  EXPECT_EQ(summary["steps"], 8);
  EXPECT_EQ(summary["loss_scale"]["skipped_steps"], 1) << summary["loss_scale"];
  EXPECT_EQ(summary["loss_scale"]["scale"], 32768.0) << summary["loss_scale"];
  EXPECT_EQ(summary["loss_scale"]["growth_tracker"], 5) << summary["loss_scale"];
  EXPECT_TRUE(std::isfinite(summary["final_train_loss"].get<double>())) << summary;
  // Step 3 changed neither the model nor the optimizer's momentum; steps 2 and 4 did.
  EXPECT_TRUE(same_tensors(straight, 2, 3, "model.safetensors"));
  EXPECT_TRUE(same_tensors(straight, 2, 3, "state.safetensors"));
  EXPECT_FALSE(same_tensors(straight, 1, 2, "model.safetensors"));
  EXPECT_FALSE(same_tensors(straight, 3, 4, "model.safetensors"));

  // Killed after step 4's checkpoint, resumed: the scale, its tracker and the skipped step come
  // back with it.
  const std::string resumed = dir / "resumed";
  auto first =
      run_loom("train --out " + resumed + fp16_args(), overflow + " LOOM_FAULT_STOP_AFTER_STEP=4");
  ASSERT_EQ(first.signal, SIGKILL) << first.output;
  const auto second = run_loom("train --out " + resumed + fp16_args() + " --resume");
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_EQ(summary_of(resumed)["resumed_from_step"], 4);
  EXPECT_EQ(summary_of(resumed)["loss_scale"], summary["loss_scale"]);
  expect_same_model(resumed, straight, 0);
}

// Two data-parallel ranks, rank 1's gradients overflowing in step 3: both skip it, and the run
// ends as one process with the same fault does. Not bit for bit: fp16's weight-gradient products
// sum over the batch, and round otherwise over each half of it (0.5% apart here); a rank that
// stepped from the overflowed gradients would hold inf or NaN.
TEST(LossScaling, DataParallelRanksSkipTogetherAndTrainAsOne) {
  TempDir dir;
  const std::string args = fp16_args() + " --set checkpoint.every_steps=0";
  const auto one = run_loom("train --out " + (dir / "one") + args + " --set data.batch_size=32",
                            "LOOM_FAULT_OVERFLOW_RANK_AT_STEP=0:3");
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const auto two = run_loom("launch --nproc-per-node 2 -- " + loom_binary() + " train --out " +
                                (dir / "two") + args + " --set data.global_batch=32",
                            "LOOM_FAULT_OVERFLOW_RANK_AT_STEP=1:3");
  ASSERT_EQ(two.exit_code, 0) << two.output;
  const auto summary = summary_of(dir / "two");
  EXPECT_EQ(summary["data_parallel"]["ranks"], 2);
  EXPECT_EQ(summary["loss_scale"], summary_of(dir / "one")["loss_scale"]);
  EXPECT_EQ(summary["loss_scale"]["skipped_steps"], 1);
  expect_same_model(dir / "two", dir / "one", 2e-2);
}

}  // namespace
}  // namespace loom::test
