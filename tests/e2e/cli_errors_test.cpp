// The `loom` command's contract for bad input: exit 2 and the key for configuration errors,
// exit 1 with what and where for runtime failures, never a crash.
#include <gtest/gtest.h>
#include <torch/headeronly/version.h>

#include <filesystem>

#include "e2e/json_output.h"
#include "loom/core/torch_build.h"
#include "loom/train/checkpoint.h"
#include "tools/run_compare.h"
#include "tools/test_support.h"

namespace loom {
namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(CliErrors, HelpVersionAndUsage) {
  EXPECT_EQ(test::run_loom("--help").exit_code, 0);
  auto train_help = test::run_loom("train --help");
  EXPECT_EQ(train_help.exit_code, 0);
  EXPECT_TRUE(contains(train_help.output, "--resume")) << train_help.output;
  auto version = test::run_loom("version --json");
  EXPECT_EQ(version.exit_code, 0);
  // The package's own name for the torch the headers say ("2.11.0" -> "2.11.0+cu130").
  const auto versions = test::json_line(version.output);
  EXPECT_EQ(versions["libtorch"], loom::torch_build().version) << version.output;
  EXPECT_EQ(versions["libtorch"].get<std::string>().rfind(TORCH_VERSION, 0), 0u) << version.output;
  EXPECT_EQ(versions["cuda"], loom::torch_build().cuda) << version.output;
  auto version_flag = test::run_loom("--version");
  EXPECT_EQ(version_flag.exit_code, 0);
  EXPECT_TRUE(contains(version_flag.output, "libtorch " + loom::torch_build().version))
      << version_flag.output;
  EXPECT_EQ(test::run_loom("").exit_code, 2);
  EXPECT_EQ(test::run_loom("frobnicate").exit_code, 2);
  EXPECT_EQ(test::run_loom("train --no-such-flag").exit_code, 2);
}

// Transform lists are checked against the data before training: exit 2, naming the key.
TEST(CliErrors, TransformListsThatCannotWorkExitTwoAndNameTheKey) {
  test::TempDir dir;
  const std::string base = "train --out " + (dir / "run") + " " + test::tiny_synthetic_args();
  auto mismatch = test::run_loom(base + " --set 'data.transforms=[center_crop: 8]'");
  EXPECT_EQ(mismatch.exit_code, 2);
  EXPECT_TRUE(contains(mismatch.output, "config key 'data.eval_transforms': they make"))
      << mismatch.output;
  auto normalize =
      test::run_loom(base + " --set 'data.eval_transforms=[normalize: {mean: 0.5, std: 0.2}]'");
  EXPECT_EQ(normalize.exit_code, 2);
  EXPECT_TRUE(contains(normalize.output, "its normalize differs")) << normalize.output;
  auto unknown = test::run_loom(base + " --set 'data.transforms=[random_flip]'");
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_TRUE(contains(unknown.output, "unknown transform 'random_flip'")) << unknown.output;
}

TEST(CliErrors, BadEnvironmentSettingsExitTwoAndNameTheVariable) {
  auto level = test::run_loom("version", "LOOM_LOG_LEVEL=loud");
  EXPECT_EQ(level.exit_code, 2);
  EXPECT_TRUE(contains(level.output, "LOOM_LOG_LEVEL")) << level.output;
  test::TempDir dir;
  auto fault = test::run_loom("train --out " + (dir / "run") + " " + test::tiny_synthetic_args(),
                              "LOOM_FAULT_STOP_AFTER_STEP=soon");
  EXPECT_EQ(fault.exit_code, 2);
  EXPECT_TRUE(contains(fault.output,
                       "environment variable LOOM_FAULT_STOP_AFTER_STEP: expected an "
                       "integer, got 'soon'"))
      << fault.output;
}

// A --set takes one key=value: a configuration file named after it is the command's.
// `loom bench comm`'s choices are checked before it looks for ranks.
TEST(CliErrors, BenchCommRefusesSizesAndBackendsItCannotTime) {
  const auto odd = test::run_loom_reporting("bench comm --sizes 4K,6");
  EXPECT_EQ(odd.result.exit_code, 2) << odd.result.output;
  EXPECT_EQ(odd.error["fields"]["key"], "--sizes") << odd.error;
  const auto backend = test::run_loom("bench comm --backends nccl");
  EXPECT_EQ(backend.exit_code, 2) << backend.output;
  EXPECT_NE(backend.output.find("--backends"), std::string::npos) << backend.output;
}

TEST(CliErrors, AConfigurationFileMayFollowASet) {
  test::TempDir dir;
  test::write_text(dir / "c.yaml", "train:\n  max_steps: 3\n");
  auto r = test::run_loom("config --json --set train.epochs=2 " + (dir / "c.yaml") +
                          " --set seed=7");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto config = test::json_line(r.output);
  EXPECT_EQ(config["train"]["epochs"], 2);
  EXPECT_EQ(config["train"]["max_steps"], 3);
  EXPECT_EQ(config["seed"], 7);
}

TEST(CliErrors, UnknownKeyExitsTwoAndSuggests) {
  auto r = test::run_loom("train --set train.epoch=3");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.output,
                       "unknown config key 'train.epoch' (from --set); did you mean "
                       "'train.epochs'?"))
      << r.output;
}

TEST(CliErrors, WrongTypeInAFileExitsTwoAndNamesKeyTypeAndValue) {
  test::TempDir dir;
  test::write_text(dir / "c.yaml", "train:\n  epochs: three\n");
  auto r = test::run_loom("train " + (dir / "c.yaml"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.output, "config key 'train.epochs' (in " + (dir / "c.yaml") +
                                     "): expected an integer, got 'three'"))
      << r.output;
}

TEST(CliErrors, MissingConfigFileNamesThePath) {
  auto r = test::run_loom("train /nonexistent/loom.yaml");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.output, "'/nonexistent/loom.yaml'")) << r.output;
}

TEST(CliErrors, MissingDataNamesThePathAndThePackage) {
  test::TempDir dir;
  auto r = test::run_loom("train --out " + (dir / "run") + " --set data.path=/nonexistent/fmnist");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.output, "'/nonexistent/fmnist'")) << r.output;
  EXPECT_TRUE(contains(r.output, "dataset-fashion-mnist")) << r.output;
}

TEST(CliErrors, ModelThatDoesNotFitTheDataIsAConfigError) {
  test::TempDir dir;
  auto r = test::run_loom("train --out " + (dir / "run") + " --set model=vit_tiny");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.output, "model.patch_size")) << r.output;
}

// A diverging run stops at the first non-finite loss, names the step, and the checkpoint
// written before it is intact.
TEST(CliErrors, NonFiniteLossStopsWithTheStepAndKeepsTheLastGoodCheckpoint) {
  test::TempDir dir;
  auto r = test::run_loom("train --out " + (dir / "run") + " " + test::tiny_synthetic_args() +
                          " --set model=mlp --set optimizer.lr=1e30 --set schedule.warmup_steps=0"
                          " --set checkpoint.every_steps=1");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  train::CheckpointStore store(dir / "run/checkpoints", 3);
  ASSERT_TRUE(store.latest().has_value());
  train::CheckpointData last = train::CheckpointStore::load(*store.latest());
  // A checkpoint after every step: the last good one is the step before the one that failed.
  EXPECT_TRUE(contains(r.output, "at step " + std::to_string(last.position.step + 1) + " "))
      << r.output;
  EXPECT_TRUE(contains(r.output, "Last good checkpoint: " + test::latest_checkpoint(dir / "run")))
      << r.output;
  for (const auto& [name, t] : last.model) {
    EXPECT_TRUE(t.isfinite().all().item<bool>()) << name << " in the last good checkpoint";
  }
  EXPECT_FALSE(std::filesystem::exists(dir / "run/summary.json"));
}

}  // namespace
}  // namespace loom
