// Exact resume: a run interrupted (after a checkpoint, or in the middle of writing one) and
// resumed ends with the same bytes in its final checkpoint as a run never interrupted.
#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "e2e/json_output.h"
#include "tools/run_compare.h"
#include "tools/test_support.h"

namespace loom {
namespace {

struct ResumeCase {
  std::string name;
  std::string settings;
};

void PrintTo(const ResumeCase& c, std::ostream* out) { *out << c.name; }

class Resume : public ::testing::TestWithParam<ResumeCase> {
 protected:
  std::string args(const std::string& out) {
    return "train --out " + out + " " + test::tiny_synthetic_args() +
           " --set train.epochs=2 --set checkpoint.every_steps=3 " + GetParam().settings;
  }

  // Trains straight through, then again killed by `fault` (which must leave `latest` naming
  // `survivor`) and resumed; the two final checkpoints must be byte-identical. Returns the
  // resumed run's summary.
  nlohmann::json kill_resume_and_compare(const std::string& fault, const std::string& survivor) {
    test::TempDir dir;
    auto straight = test::run_loom(args(dir / "straight"));
    EXPECT_EQ(straight.exit_code, 0) << straight.output;
    auto killed = test::run_loom(args(dir / "resumed"), fault);
    EXPECT_EQ(killed.signal, SIGKILL) << killed.output;
    EXPECT_EQ(test::read_text(dir / "resumed/checkpoints/latest"), survivor + "\n");
    auto resumed = test::run_loom(args(dir / "resumed") + " --resume");
    EXPECT_EQ(resumed.exit_code, 0) << resumed.output;
    test::expect_identical_runs(dir / "straight", dir / "resumed");
    const auto summary = test::summary_of(dir / "resumed");
    EXPECT_EQ(summary["steps"], test::summary_of(dir / "straight")["steps"]);
    return summary;
  }
};

TEST_P(Resume, AfterPreemptionIsBitIdentical) {
  const auto summary = kill_resume_and_compare("LOOM_FAULT_STOP_AFTER_STEP=9", "step-00000009");
  EXPECT_EQ(summary["resumed_from_step"], 9) << summary.dump(2);
}

TEST_P(Resume, AfterACrashInTheMiddleOfASaveIsBitIdentical) {
  // Killed while writing step 6's checkpoint: it goes on from step 3's, the last committed.
  const auto summary = kill_resume_and_compare("LOOM_FAULT_KILL_IN_SAVE=6", "step-00000003");
  EXPECT_EQ(summary["resumed_from_step"], 3) << summary.dump(2);
}

TEST(ResumeFinished, ReportsTheFinishedRunWithoutTrainingMore) {
  test::TempDir dir;
  const std::string args = "train --out " + (dir / "run") + " " + test::tiny_synthetic_args() +
                           " --set model=mlp --set train.epochs=1";
  ASSERT_EQ(test::run_loom(args).exit_code, 0);
  const auto first = test::summary_of(dir / "run");
  auto again = test::run_loom(args + " --resume");
  ASSERT_EQ(again.exit_code, 0) << again.output;
  const auto second = test::summary_of(dir / "run");
  EXPECT_EQ(second["steps"], first["steps"]);
  EXPECT_EQ(second["test_accuracy"], first["test_accuracy"]);
  // It went on from the last step, with nothing left to train.
  EXPECT_TRUE(first["resumed_from_step"].is_null());
  EXPECT_EQ(second["resumed_from_step"], first["steps"]);
}

// Decoded images: the loader's position is in the checkpoint and its batches do not depend on
// its thread count, so a run resumed with other data.workers ends identical; a resume that would
// read other samples (here: another batch size) is refused, naming what changed.
TEST(ResumeImageFolder, AnyLoaderThreadCountContinuesTheSameSamples) {
  test::TempDir dir;
  ASSERT_EQ(test::run_loom("data synth-images " + (dir / "images") +
                           " --count 120 --classes 2 --width 48 --height 40")
                .exit_code,
            0);
  auto args = [&](const std::string& out, int workers) {
    return "train --out " + out + " --set data=image_folder --set data.path=" + (dir / "images") +
           " --set data.image_size=24 --set data.batch_size=10 --set model=mlp"
           " --set train.epochs=2 --set checkpoint.every_steps=5 --set runtime.threads=1"
           " --set data.workers=" +
           std::to_string(workers);
  };
  auto straight = test::run_loom(args(dir / "straight", 1));
  ASSERT_EQ(straight.exit_code, 0) << straight.output;
  auto killed = test::run_loom(args(dir / "resumed", 2), "LOOM_FAULT_STOP_AFTER_STEP=15");
  ASSERT_EQ(killed.signal, SIGKILL) << killed.output;
  auto resumed = test::run_loom(args(dir / "resumed", 3) + " --resume");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  test::expect_identical_runs(dir / "straight", dir / "resumed");
  const auto manifest = nlohmann::json::parse(
      test::read_text(test::latest_checkpoint(dir / "resumed") + "/manifest.json"));
  EXPECT_EQ(manifest["loader"]["steps_per_epoch"], 12) << manifest.dump(2);  // 120 images / 10

  const auto changed =
      test::run_loom_reporting(args(dir / "resumed", 2) + " --set data.batch_size=8 --resume");
  EXPECT_EQ(changed.result.exit_code, 1) << changed.result.output;
  ASSERT_FALSE(changed.error.is_null()) << changed.result.output;
  EXPECT_EQ(changed.error["fields"]["problem"], "batch") << changed.error.dump();
  EXPECT_EQ(changed.error["fields"]["value"], "10") << changed.error.dump();    // written
  EXPECT_EQ(changed.error["fields"]["expected"], "8") << changed.error.dump();  // now
}

// checkpoint.async: the records of metrics.jsonl of a given type.
std::vector<nlohmann::json> records_of(const std::string& run, const std::string& type) {
  std::vector<nlohmann::json> records;
  std::istringstream lines(test::read_text(run + "/metrics.jsonl"));
  for (std::string line; std::getline(lines, line);) {
    auto record = nlohmann::json::parse(line);
    if (record["type"] == type) records.push_back(std::move(record));
  }
  return records;
}

// Killed while a background write is under way (the writer pauses halfway, so that training
// has gone on past the step being written): the run goes on from the checkpoint before it, and
// ends as one never interrupted.
TEST(AsyncCheckpoints, AKillDuringABackgroundWriteResumesFromThePreviousCheckpoint) {
  test::TempDir dir;
  auto args = [&](const std::string& out) {
    return "train --out " + out + " " + test::tiny_synthetic_args() +
           " --set model=mlp --set optimizer.name=adamw --set train.epochs=1"
           " --set train.log_every=1 --set checkpoint.every_steps=3 --set checkpoint.async=true";
  };
  auto straight = test::run_loom(args(dir / "straight"));
  ASSERT_EQ(straight.exit_code, 0) << straight.output;
  auto killed = test::run_loom(args(dir / "resumed"),
                               "LOOM_FAULT_SLOW_SAVE_MS=500 LOOM_FAULT_KILL_IN_SAVE=6");
  ASSERT_EQ(killed.signal, SIGKILL) << killed.output;
  EXPECT_EQ(test::read_text(dir / "resumed/checkpoints/latest"), "step-00000003\n");
  // Steps after 6 were trained while step 6's checkpoint was being written; step 3's commit
  // was recorded with the time it took in the background.
  EXPECT_GT(records_of(dir / "resumed", "step").back()["step"].get<int>(), 6);
  const auto committed = records_of(dir / "resumed", "checkpoint");
  ASSERT_EQ(committed.size(), 1u);
  EXPECT_EQ(committed[0]["step"], 3);
  EXPECT_EQ(committed[0]["async"], true);
  EXPECT_GE(committed[0]["background_seconds"].get<double>(), 0.5);

  auto resumed = test::run_loom(args(dir / "resumed") + " --resume");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  test::expect_identical_runs(dir / "straight", dir / "resumed");
  EXPECT_EQ(test::summary_of(dir / "resumed")["resumed_from_step"], 3);
}

// The summary and metrics.jsonl say how long each checkpoint held training up and how long it
// took in the background: a background write of over 0.3 s (the writer paused) between
// checkpoints 0.6 s apart (steps slowed to 0.2 s) holds training up for less than that pause
// (its copy), where a synchronous one holds it up for the whole write.
TEST(AsyncCheckpoints, TheSummaryAndMetricsShowTheTimeBlockedAndInTheBackground) {
  test::TempDir dir;
  const std::string faults = "LOOM_FAULT_SLOW_SAVE_MS=300 LOOM_FAULT_SLOW_RANK=0:200";
  auto args = [&](const std::string& out, bool async) {
    return "train --out " + out + " " + test::tiny_synthetic_args() +
           " --set model=mlp --set train.max_steps=9 --set train.eval=false"
           " --set checkpoint.every_steps=3 --set checkpoint.async=" +
           (async ? "true" : "false");
  };
  for (bool async : {true, false}) {
    const std::string run = dir / (async ? "async" : "sync");
    auto result = test::run_loom(args(run, async), faults);
    ASSERT_EQ(result.exit_code, 0) << result.output;
    const auto times = test::summary_of(run)["checkpoints"];
    EXPECT_EQ(times["async"], async) << times.dump(2);
    EXPECT_EQ(times["committed"], 3) << times.dump(2);  // steps 3, 6 and 9
    const auto records = records_of(run, "checkpoint");
    ASSERT_EQ(records.size(), 3u);
    double blocked = 0, background = 0;
    for (size_t i = 0; i < records.size(); ++i) {
      EXPECT_EQ(records[i]["step"], 3 * static_cast<int>(i + 1));
      EXPECT_EQ(records[i]["async"], async);
      EXPECT_EQ(records[i]["path"],
                run + "/checkpoints/step-0000000" + std::to_string(3 * (i + 1)));
      blocked += records[i]["blocked_seconds"].get<double>();
      background += records[i]["background_seconds"].get<double>();
      if (async) {
        EXPECT_GE(records[i]["background_seconds"].get<double>(), 0.3) << records[i].dump();
        EXPECT_LT(records[i]["blocked_seconds"].get<double>(), 0.3) << records[i].dump();
      } else {
        EXPECT_GE(records[i]["blocked_seconds"].get<double>(), 0.3) << records[i].dump();
        EXPECT_EQ(records[i]["background_seconds"].get<double>(), 0.0) << records[i].dump();
      }
    }
    EXPECT_NEAR(times["blocked_seconds"].get<double>(), blocked, 1e-6);
    EXPECT_NEAR(times["background_seconds"].get<double>(), background, 1e-6);
    EXPECT_EQ(test::read_text(run + "/checkpoints/latest"), "step-00000009\n");
  }
}

INSTANTIATE_TEST_SUITE_P(
    Runs, Resume,
    ::testing::Values(
        ResumeCase{"CnnSgdDropoutAugment", "--set model=cnn --set data.augment=true"},
        ResumeCase{
            "MlpAdamwAccumulateClip",
            "--set model=mlp --set optimizer.name=adamw --set optimizer.lr=0.001 "
            "--set train.grad_accum=2 --set train.grad_clip=1.0 --set train.label_smoothing=0.1"},
        // Written in the background: killed in the writer's thread, or stopped once the
        // checkpoint of the stop step has committed.
        ResumeCase{"MlpAdamwAsyncCheckpoints",
                   "--set model=mlp --set optimizer.name=adamw --set optimizer.lr=0.001 "
                   "--set checkpoint.async=true"}),
    [](const auto& test_info) { return test_info.param.name; });

}  // namespace
}  // namespace loom
