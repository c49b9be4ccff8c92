// `loom train --autotune`: the run tries other thread counts and prefetch depths in its first
// steps, goes on with the chosen ones, and reports them in summary.json, metrics.jsonl and a
// config snippet. Which values win is a timing (bench/), not asserted here; that the run uses
// and reports the winner consistently is.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "tools/test_support.h"

namespace loom::test {
namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

TEST(Autotune, RunUsesAndReportsTheChosenSettings) {
  TempDir dir;
  const auto r = run_loom("train " + tiny_synthetic_args() + " " + quick_autotune_args() +
                          " --set train.epochs=4 --set data.workers=1 --set runtime.threads=1" +
                          " --set checkpoint.enabled=false --out " + (dir / "run"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("autotune: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("/autotune.yaml"), std::string::npos) << r.output;

  const auto summary = nlohmann::json::parse(read_text(dir / "run/summary.json"));
  const auto& tune = summary["autotune"];
  ASSERT_TRUE(tune.is_object()) << summary.dump(2);
  EXPECT_TRUE(tune["complete"].get<bool>()) << tune.dump(2);
  EXPECT_EQ(tune["start"], nlohmann::json::parse(
                               R"({"data.workers": 1, "runtime.threads": 1,
                                   "data.prefetch_batches": 4})"));
  EXPECT_EQ(summary["steps"], 64);  // tuning steps are training steps
  EXPECT_LE(tune["steps"].get<int>(), 64);
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
  EXPECT_NE(read_text(dir / "run/metrics.jsonl").find(R"("type":"autotune")"), std::string::npos);

  // The snippet goes on top of the user's configuration: its keys win, the others stay.
  write_text(dir / "mine.yaml", "data: {workers: 1, prefetch_batches: 4}\ntrain: {epochs: 11}\n");
  const auto config = run_loom("config " + (dir / "mine.yaml") + " " + (dir / "run/autotune.yaml"));
  ASSERT_EQ(config.exit_code, 0) << config.output;
  EXPECT_NE(config.output.find("  workers: " + chosen["data.workers"].dump() + "\n"),
            std::string::npos)
      << config.output;
  EXPECT_NE(config.output.find("  prefetch_batches: " + chosen["data.prefetch_batches"].dump()),
            std::string::npos)
      << config.output;
  EXPECT_NE(config.output.find("  epochs: 11\n"), std::string::npos) << config.output;
}

TEST(Autotune, TooShortARunIsNotTunedAndSaysWhy) {
  TempDir dir;
  const auto r = run_loom("train " + tiny_synthetic_args() +
                          " --autotune --set train.epochs=1 --set checkpoint.enabled=false --out " +
                          (dir / "run"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("autotune: skipped, the run's 16 steps leave 4 for tuning"),
            std::string::npos)
      << r.output;
  const auto summary = nlohmann::json::parse(read_text(dir / "run/summary.json"));
  EXPECT_NE(summary["autotune"]["skipped"].get<std::string>().find("autotune.max_share"),
            std::string::npos);
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
