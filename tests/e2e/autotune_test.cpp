// `loom train --autotune`: the run tries other thread counts and prefetch depths in its first
// steps, goes on with the chosen ones, and reports them in summary.json, metrics.jsonl and a
// config snippet. Which values win is a timing (bench/), not asserted here; that the run uses
// and reports the winner consistently is.
#include <gtest/gtest.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "e2e/json_output.h"
#include "tools/test_support.h"

namespace loom::test {
namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

TEST(Autotune, RunUsesAndReportsTheChosenSettings) {
  TempDir dir;
  // 8 epochs (128 steps): the thread candidates grow with the host's cores, and every one must
  // be tried (complete) on a many-core host too.
  const auto r = run_loom("train " + tiny_synthetic_args() + " " + quick_autotune_args() +
                          " --set train.epochs=8 --set data.workers=1 --set runtime.threads=1" +
                          " --set checkpoint.enabled=false --out " + (dir / "run"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(std::filesystem::exists(dir / "run/autotune.yaml"));

  const auto summary = nlohmann::json::parse(read_text(dir / "run/summary.json"));
  const auto& tune = summary["autotune"];
  ASSERT_TRUE(tune.is_object()) << summary.dump(2);
  EXPECT_TRUE(tune["complete"].get<bool>()) << tune.dump(2);
  EXPECT_EQ(tune["start"], nlohmann::json::parse(
                               R"({"data.workers": 1, "runtime.threads": 1,
                                   "data.prefetch_batches": 4})"));
  EXPECT_EQ(summary["steps"], 128);  // tuning steps are training steps
  EXPECT_LE(tune["steps"].get<int>(), 128);
  // The start and, whatever the cores, prefetch depths 2 and 8.
  ASSERT_GE(tune["trials"].size(), 3u) << tune.dump(2);
  EXPECT_EQ(tune["trials"][0]["varied"], "start");
  for (const auto& t : tune["trials"]) {
    const auto rates = t["samples_per_second"].get<std::vector<double>>();
    ASSERT_EQ(rates.size(), 3u) << t.dump();
    EXPECT_GT(t["score"].get<double>(), 0) << t.dump();
    EXPECT_DOUBLE_EQ(t["score"].get<double>(), median(rates)) << t.dump();
  }
  // The run went on with the chosen values, and says so.
  const auto& chosen = tune["chosen"];
  EXPECT_EQ(summary["data"]["loader_threads"], chosen["data.workers"]) << summary.dump(2);
  EXPECT_EQ(summary["threads"], chosen["runtime.threads"]) << summary.dump(2);
  EXPECT_EQ(summary["choices"]["threads"], "chosen by the autotuner");
  EXPECT_GE(tune["chosen_samples_per_second"].get<double>(),
            tune["start_samples_per_second"].get<double>());
  // metrics.jsonl records the choice once, as the summary has it.
  const auto records = metrics_records(dir / "run", "autotune");
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0]["chosen"], chosen);
  EXPECT_FALSE(records[0]["resumed"].get<bool>());

  // The snippet goes on top of the user's configuration: its keys win, the others stay.
  write_text(dir / "mine.yaml", "data: {workers: 1, prefetch_batches: 4}\ntrain: {epochs: 11}\n");
  const auto config =
      run_loom("config --json " + (dir / "mine.yaml") + " " + (dir / "run/autotune.yaml"));
  ASSERT_EQ(config.exit_code, 0) << config.output;
  const auto resolved = json_line(config.output);
  ASSERT_TRUE(chosen.contains("data.workers") && chosen.contains("data.prefetch_batches"))
      << chosen.dump();
  for (const auto& [key, value] : chosen.items()) {
    const size_t dot = key.find('.');
    EXPECT_EQ(resolved[key.substr(0, dot)][key.substr(dot + 1)], value) << key;
  }
  EXPECT_EQ(resolved["train"]["epochs"], 11);
}

// A run preempted after tuning resumes with the values it chose, kept in the checkpoint, instead
// of spending steps to find them again.
TEST(Autotune, ResumedRunKeepsTheValuesChosenBeforeThePreemption) {
  TempDir dir;
  // Tuning stops by step 72 (max_share 0.75 of 96) whatever the host's cores make it try.
  const std::string args = "train " + tiny_synthetic_args() + " " + quick_autotune_args() +
                           " --set train.epochs=6 --set data.workers=1 --set runtime.threads=1" +
                           " --set autotune.max_share=0.75" +
                           " --set checkpoint.every_steps=16 --out " + (dir / "run");
  const auto killed = run_loom(args, "LOOM_FAULT_STOP_AFTER_STEP=80");
  ASSERT_EQ(killed.signal, SIGKILL) << killed.output;
  // What the first process chose, from its metrics record (it never wrote a summary).
  nlohmann::json first;
  std::istringstream lines(read_text(dir / "run/metrics.jsonl"));
  for (std::string line; std::getline(lines, line);) {
    const auto record = nlohmann::json::parse(line);
    if (record.value("type", "") == "autotune") first = record;
  }
  ASSERT_TRUE(first.is_object()) << "no autotune record before the preemption";
  ASSERT_LT(first["step"].get<int>(), 80) << "tuning must finish before the checkpoint";
  EXPECT_FALSE(first["resumed"].get<bool>());
  const auto manifest = json_file(dir / "run/checkpoints/step-00000080/manifest.json");
  ASSERT_TRUE(manifest.contains("autotune")) << manifest.dump(2);
  EXPECT_EQ(manifest["autotune"]["chosen"], first["chosen"]) << manifest["autotune"].dump(2);

  const auto resumed = run_loom(args + " --resume");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  const auto summary = nlohmann::json::parse(read_text(dir / "run/summary.json"));
  const auto& tune = summary["autotune"];
  EXPECT_TRUE(tune["resumed"].get<bool>()) << tune.dump(2);
  EXPECT_EQ(tune["chosen"], first["chosen"]) << tune.dump(2);
  EXPECT_GE(tune["trials"].size(), 3u) << tune.dump(2);  // the earlier trials, kept
  EXPECT_EQ(summary["data"]["loader_threads"], first["chosen"]["data.workers"]);
  EXPECT_EQ(summary["threads"], first["chosen"]["runtime.threads"]);
  EXPECT_EQ(summary["choices"]["threads"], "chosen by the autotuner before the resume");
  // Both processes recorded the choice; the second says it came from the checkpoint.
  const auto records = metrics_records(dir / "run", "autotune");
  ASSERT_EQ(records.size(), 2u);
  EXPECT_TRUE(records[1]["resumed"].get<bool>());
  EXPECT_EQ(records[1]["chosen"], first["chosen"]);
  EXPECT_TRUE(std::filesystem::exists(dir / "run/autotune.yaml"));
}

TEST(Autotune, TooShortARunIsNotTunedAndSaysWhy) {
  TempDir dir;
  const auto r = run_loom("train " + tiny_synthetic_args() +
                          " --autotune --set train.epochs=1 --set checkpoint.enabled=false --out " +
                          (dir / "run"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto summary = nlohmann::json::parse(read_text(dir / "run/summary.json"));
  EXPECT_EQ(summary["steps"], 16);
  // Nothing tried or chosen: the summary holds only the reason, which names the key to raise
  // with the steps it allowed (16 x the default share, 0.25).
  EXPECT_EQ(summary["autotune"].size(), 1u) << summary["autotune"].dump(2);
  EXPECT_NE(summary["autotune"]["skipped"].get<std::string>().find(
                "leave 4 for tuning (autotune.max_share)"),
            std::string::npos)
      << summary["autotune"].dump(2);
  EXPECT_EQ(summary["choices"]["threads"], "set in runtime.threads");
  EXPECT_TRUE(metrics_records(dir / "run", "autotune").empty());
  EXPECT_FALSE(std::filesystem::exists(dir / "run/autotune.yaml"));
}

TEST(Autotune, ShareAboveOneIsAConfigError) {
  TempDir dir;
  const auto r = run_loom("train " + tiny_synthetic_args() +
                          " --autotune --set autotune.max_share=1.5 --out " + (dir / "run"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("autotune.max_share"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace loom::test
