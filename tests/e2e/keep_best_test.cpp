// checkpoint.keep_best: a run that overfits keeps its best evaluation's checkpoint, which
// checkpoint.keep alone deletes; summary.json and checkpoints/best.json name it; a resumed run
// goes on keeping it; a metric the run cannot produce is a configuration error naming the key.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>

#include "e2e/json_output.h"
#include "tools/run_compare.h"
#include "tools/test_support.h"

namespace loom {
namespace {

namespace fs = std::filesystem;

// A tiny classifier that overfits from its first epoch: 32 training images of 32 classes whose
// 4x4 prototypes the noise blurs, and an MLP at a high learning rate that learns the training
// images' noise. Two steps an epoch; every epoch evaluates on 256 images.
std::string overfitting_run(const std::string& out) {
  return "train --out " + out +
         " --set data=synthetic --set data.image_size=4 --set data.channels=1"
         " --set data.classes=32 --set data.train_samples=32 --set data.test_samples=256"
         " --set data.batch_size=16 --set runtime.threads=1 --set model=mlp"
         " --set optimizer.lr=0.2 --set schedule.name=constant --set schedule.warmup_steps=0"
         " --set train.epochs=8 --set checkpoint.keep=1 --set checkpoint.keep_best=test_loss";
}

// The step of the lowest test loss among the run's epoch records (the first, on a tie), and it.
std::pair<int64_t, double> best_evaluation(const std::string& run) {
  int64_t step = -1;
  double loss = 0;
  for (const auto& epoch : test::metrics_records(run, "epoch")) {
    if (!epoch.contains("test_loss")) continue;
    if (step < 0 || epoch["test_loss"].get<double>() < loss) {
      step = epoch["step"];
      loss = epoch["test_loss"];
    }
  }
  return {step, loss};
}

std::set<std::string> checkpoint_names(const std::string& run) {
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(run + "/checkpoints")) {
    if (entry.is_directory()) names.insert(entry.path().filename().string());
  }
  return names;
}

std::string step_name(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step-%08lld", static_cast<long long>(step));
  return name;
}

TEST(KeepBest, KeepsTheBestEvaluationsCheckpointThatKeepWouldPrune) {
  test::TempDir dir;
  const std::string run = dir / "run";
  auto trained = test::run_loom(overfitting_run(run));
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  const auto [best_step, best_loss] = best_evaluation(run);
  const auto summary = test::summary_of(run);
  const int64_t last_step = summary["steps"];
  // What the test is about: the best evaluation is not the last one.
  ASSERT_LT(best_step, last_step) << "the run did not overfit; tune overfitting_run()";

  const auto& best = summary["best_checkpoint"];
  ASSERT_TRUE(best.is_object()) << summary.dump(2);
  EXPECT_EQ(best["step"], best_step);
  EXPECT_EQ(best["metric"], "test_loss");
  EXPECT_DOUBLE_EQ(best["value"].get<double>(), best_loss);
  EXPECT_EQ(fs::path(best["path"].get<std::string>()).filename(), step_name(best_step));
  EXPECT_TRUE(fs::exists(best["path"].get<std::string>() + "/manifest.json"));
  // checkpoint.keep: 1 and the best: nothing else.
  EXPECT_EQ(checkpoint_names(run),
            (std::set<std::string>{step_name(best_step), step_name(last_step)}));
  const auto record = test::json_file(run + "/checkpoints/best.json");
  EXPECT_EQ(record["checkpoint"], step_name(best_step));
  EXPECT_EQ(record["step"], best_step);

  // The advisor says the run overfit, pointing at the kept checkpoint's step.
  const nlohmann::json* overfitting = nullptr;
  for (const auto& f : summary["findings"]) {
    if (f["id"] == "overfitting") overfitting = &f;
  }
  ASSERT_NE(overfitting, nullptr) << summary["findings"].dump(2);
  EXPECT_EQ((*overfitting)["key"], "checkpoint.keep_best");
  EXPECT_EQ((*overfitting)["step"], best_step);

  // Resumed for more epochs, the run still ranks against (and keeps) the best from before.
  auto resumed = test::run_loom(overfitting_run(run) + " --set train.epochs=10 --resume");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  const auto [best_after, loss_after] = best_evaluation(run);  // over both runs' records
  const auto again = test::summary_of(run);
  ASSERT_TRUE(again["best_checkpoint"].is_object()) << again.dump(2);
  EXPECT_EQ(again["best_checkpoint"]["step"], best_after);
  EXPECT_DOUBLE_EQ(again["best_checkpoint"]["value"].get<double>(), loss_after);
  EXPECT_EQ(
      checkpoint_names(run),
      (std::set<std::string>{step_name(best_after), step_name(again["steps"].get<int64_t>())}));
}

TEST(KeepBest, WithoutItKeepPrunesTheBest) {
  test::TempDir dir;
  const std::string run = dir / "run";
  auto trained = test::run_loom(overfitting_run(run) + " --set checkpoint.keep_best=none");
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  const auto summary = test::summary_of(run);
  EXPECT_TRUE(summary["best_checkpoint"].is_null());
  EXPECT_EQ(checkpoint_names(run),
            std::set<std::string>{step_name(summary["steps"].get<int64_t>())});
  EXPECT_FALSE(fs::exists(run + "/checkpoints/best.json"));
  // The advisor still reports the overfitting, and says to set the key.
  bool reported = false;
  for (const auto& f : summary["findings"]) {
    if (f["id"] == "overfitting") {
      reported = true;
      EXPECT_EQ(f["key"], "checkpoint.keep_best");
      EXPECT_EQ(f["step"], best_evaluation(run).first);
    }
  }
  EXPECT_TRUE(reported) << summary["findings"].dump(2);
}

// A metric the run does not produce, or a run that would rank nothing: exit 2 naming the key and
// the value. What each task's evaluation gives is accepted.
TEST(KeepBest, AMetricTheRunCannotProduceIsAConfigError) {
  test::TempDir dir;
  struct Refusal {
    std::string set, value;
  };
  for (const Refusal& r :
       {Refusal{"checkpoint.keep_best=test_perplexity", "test_perplexity"},  // images
        Refusal{"checkpoint.keep_best=test_loss --set train.eval=false", "test_loss"},
        Refusal{"checkpoint.keep_best=test_accuracy --set checkpoint.enabled=false",
                "test_accuracy"}}) {
    auto refused = test::run_loom_reporting("train --out " + (dir / "run") + " " +
                                            test::tiny_synthetic_args() + " --set " + r.set);
    EXPECT_EQ(refused.result.exit_code, 2) << r.set << "\n" << refused.result.output;
    ASSERT_FALSE(refused.error.is_null()) << refused.result.output;
    EXPECT_EQ(refused.error["kind"], "config") << refused.error;
    EXPECT_EQ(refused.error["fields"]["key"], "checkpoint.keep_best") << refused.error;
    EXPECT_EQ(refused.error["fields"]["value"], r.value) << refused.error;
  }
  EXPECT_FALSE(fs::exists(dir / "run/checkpoints"));
  // No such metric at all: the schema names the key.
  auto unknown = test::run_loom_reporting("config --set checkpoint.keep_best=val_bleu");
  EXPECT_EQ(unknown.result.exit_code, 2) << unknown.result.output;
  EXPECT_EQ(unknown.error["fields"]["key"], "checkpoint.keep_best") << unknown.error;
  // A classifier's accuracy, a language model's perplexity.
  for (const std::string& ok :
       {std::string("--set data=synthetic --set checkpoint.keep_best=test_accuracy"),
        "--set data=tokens --set data.path=" + (dir / "tokens") +
            " --set model=gpt --set checkpoint.keep_best=test_perplexity"}) {
    auto accepted = test::run_loom("config " + ok);
    EXPECT_EQ(accepted.exit_code, 0) << ok << "\n" << accepted.output;
  }
}

}  // namespace
}  // namespace loom
