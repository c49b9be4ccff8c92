// What `--resume` trains with: the run's own configuration when no file is given, a --set over
// it; a change the checkpoint cannot take refused by key before anything in the run's folder is
// written. And what a run says at its start about its batch and warm-up (summary.json's
// notices), and what an epoch's train loss covers after a resume inside it.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "e2e/json_output.h"
#include "tools/run_compare.h"
#include "tools/test_support.h"

namespace loom::test {
namespace {

namespace fs = std::filesystem;

// Every file under `dir` (checkpoints included), by its path below it, with its bytes.
std::map<std::string, std::string> folder_bytes(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    if (entry.is_regular_file()) {
      out[fs::relative(entry.path(), dir).string()] = read_text(entry.path().string());
    }
  }
  return out;
}

// A first run of one epoch with settings of its own, none of them Loom's defaults.
std::string first_run(const std::string& out) {
  return "train --out " + out + " " + tiny_synthetic_args() +
         " --set optimizer.lr=0.01 --set schedule.name=constant --set schedule.warmup_steps=0"
         " --set train.epochs=1";
}

TEST(ResumeConfig, WithoutAFileGoesOnWithTheRunsOwnConfiguration) {
  TempDir dir;
  const std::string run = dir / "run";
  auto first = run_loom(first_run(run));
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const int64_t steps_per_epoch = summary_of(run)["steps"];
  // No configuration and no data settings: all of it comes from RUN/config.yaml.
  auto resumed = run_loom("train --out " + run + " --resume --set train.epochs=2");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  const auto summary = summary_of(run);
  EXPECT_EQ(summary["resumed_from_step"], steps_per_epoch);
  EXPECT_EQ(summary["steps"], 2 * steps_per_epoch);
  // The second epoch trained at the first run's constant learning rate, not the defaults'
  // cosine from 0.05.
  const auto steps = metrics_records(run, "step");
  ASSERT_FALSE(steps.empty());
  for (const auto& step : steps) EXPECT_DOUBLE_EQ(step["lr"].get<double>(), 0.01) << step;
  // The run's file now says what it trained with: its own settings and the --set.
  const auto written = run_loom("config --json " + run + "/config.yaml");
  ASSERT_EQ(written.exit_code, 0) << written.output;
  const auto config = json_line(written.output);
  EXPECT_EQ(config["train"]["epochs"], 2);
  EXPECT_EQ(config["schedule"]["name"], "constant");
  EXPECT_EQ(config["data"]["source"], "synthetic");
  EXPECT_EQ(config["optimizer"]["lr"], 0.01);
}

TEST(ResumeConfig, AChangeTheCheckpointCannotTakeIsRefusedAndTheFolderStaysAsItWas) {
  TempDir dir;
  const std::string run = dir / "run";
  auto first = run_loom(first_run(run));
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const auto before = folder_bytes(run);
  struct Refusal {
    std::string set, key, checkpoint_value, value;
  };
  for (const Refusal& r : {Refusal{"optimizer.name=adamw", "optimizer.name", "sgd", "adamw"},
                           Refusal{"model.width=48", "model.width", "32", "48"},
                           Refusal{"data.classes=5", "data.classes", "4", "5"}}) {
    auto refused = run_loom_reporting("train --out " + run + " --resume --set " + r.set);
    EXPECT_EQ(refused.result.exit_code, 2) << refused.result.output;
    ASSERT_FALSE(refused.error.is_null()) << refused.result.output;
    EXPECT_EQ(refused.error["kind"], "config");
    EXPECT_EQ(refused.error["fields"]["key"], r.key) << refused.error;
    EXPECT_EQ(refused.error["fields"]["checkpoint_value"], r.checkpoint_value) << refused.error;
    EXPECT_EQ(refused.error["fields"]["value"], r.value) << refused.error;
    EXPECT_EQ(folder_bytes(run), before) << r.set;
  }
  // A change found only while loading (the data set's size, which the loader's state holds) is
  // refused before the run's files are written too.
  auto data_changed =
      run_loom_reporting("train --out " + run + " --resume --set data.train_samples=128");
  EXPECT_EQ(data_changed.result.exit_code, 1) << data_changed.result.output;
  EXPECT_EQ(data_changed.error["kind"], "data") << data_changed.error;
  EXPECT_EQ(folder_bytes(run), before);
  // A hyperparameter may change.
  auto lr_changed =
      run_loom("train --out " + run + " --resume --set train.epochs=2 --set optimizer.lr=0.02");
  EXPECT_EQ(lr_changed.exit_code, 0) << lr_changed.output;
}

TEST(ResumeConfig, AnEpochResumedInsideItSaysItsLossCoversTheStepsSinceTheResume) {
  TempDir dir;
  const std::string run = dir / "run";
  const std::string args = first_run(run) + " --set checkpoint.every_steps=5";
  auto stopped = run_loom(args, "LOOM_FAULT_STOP_AFTER_STEP=5");
  ASSERT_NE(stopped.exit_code, 0) << stopped.output;
  auto resumed = run_loom(args + " --resume");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  const auto epochs = metrics_records(run, "epoch");
  ASSERT_EQ(epochs.size(), 1u) << read_text(run + "/metrics.jsonl");
  const int64_t steps = summary_of(run)["steps"];
  EXPECT_EQ(epochs[0]["train_loss_from_step_in_epoch"], 5) << epochs[0];
  EXPECT_EQ(epochs[0]["train_loss_steps"], steps - 5) << epochs[0];
  // An epoch trained whole says nothing of the kind.
  auto whole = run_loom(first_run(dir / "whole"));
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  const auto whole_epochs = metrics_records(dir / "whole", "epoch");
  ASSERT_EQ(whole_epochs.size(), 1u);
  EXPECT_FALSE(whole_epochs[0].contains("train_loss_from_step_in_epoch"));
  EXPECT_EQ(whole_epochs[0]["train_loss_steps"], steps);
}

std::vector<std::string> notice_ids(const std::string& run) {
  std::vector<std::string> ids;
  for (const auto& n : summary_of(run)["notices"]) ids.push_back(n["id"]);
  return ids;
}

TEST(StartNotices, AWarmUpLongerThanTheRunIsSaid) {
  TempDir dir;
  const std::string base = "train " + tiny_synthetic_args() + " --set train.max_steps=3";
  auto long_warmup =
      run_loom(base + " --out " + (dir / "long") + " --set schedule.warmup_steps=100");
  ASSERT_EQ(long_warmup.exit_code, 0) << long_warmup.output;
  const auto notices = summary_of(dir / "long")["notices"];
  ASSERT_EQ(notices.size(), 1u) << notices;
  EXPECT_EQ(notices[0]["id"], "warmup_exceeds_run");
  EXPECT_EQ(notices[0]["key"], "schedule.warmup_steps");
  auto short_warmup =
      run_loom(base + " --out " + (dir / "short") + " --set schedule.warmup_steps=1");
  ASSERT_EQ(short_warmup.exit_code, 0) << short_warmup.output;
  EXPECT_TRUE(notice_ids(dir / "short").empty());
}

// The same file on two replicas trains on twice the batch unless data.global_batch keeps it.
TEST(StartNotices, APerReplicaBatchThatGrowsWithTheReplicasIsSaid) {
  TempDir dir;
  const std::string train = test::loom_binary() + " train " + tiny_synthetic_args() +
                            " --set train.max_steps=2 --set schedule.warmup_steps=1";
  auto grown = run_loom("launch --nproc-per-node 2 -- " + train + " --out " + (dir / "grown"));
  ASSERT_EQ(grown.exit_code, 0) << grown.output;
  const auto notices = summary_of(dir / "grown")["notices"];
  ASSERT_EQ(notices.size(), 1u) << notices;
  EXPECT_EQ(notices[0]["id"], "batch_per_replica");
  EXPECT_EQ(notices[0]["key"], "data.global_batch");
  EXPECT_EQ(summary_of(dir / "grown")["layout"]["global_batch"], 32);
  auto kept = run_loom("launch --nproc-per-node 2 -- " + train + " --out " + (dir / "kept") +
                       " --set data.global_batch=16");
  ASSERT_EQ(kept.exit_code, 0) << kept.output;
  EXPECT_TRUE(notice_ids(dir / "kept").empty());
}

}  // namespace
}  // namespace loom::test
