// `loom train` end to end on real data: the files it writes and what they say.
#include <gtest/gtest.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "e2e/json_output.h"
#include "loom/core/settings.h"
#include "loom/core/topology.h"
#include "tools/test_support.h"

namespace loom {
namespace {

TEST(TrainRun, FashionMnistWritesConfigMetricsSummaryAndCheckpoints) {
  if (!std::filesystem::exists(setting("LOOM_FASHION_MNIST_DIR"))) {
    GTEST_SKIP() << "Fashion-MNIST (dataset-fashion-mnist) is not installed";
  }
  test::TempDir dir;
  auto r = test::run_loom("train --out " + (dir / "run") +
                          " --set train.max_steps=150 --set train.log_every=50");
  ASSERT_EQ(r.exit_code, 0) << r.output;

  auto summary = nlohmann::json::parse(test::read_text(dir / "run/summary.json"));
  for (const char* key :
       {"test_accuracy", "test_loss", "epochs", "steps", "samples_per_second", "wall_seconds",
        "precision", "memory_format", "threads", "model", "parameters"}) {
    EXPECT_TRUE(summary.contains(key)) << key;
  }
  EXPECT_EQ(summary["model"], "cnn");
  EXPECT_EQ(summary["steps"], 150);
  // 150 steps of 64 images already beat 75% on Fashion-MNIST (chance is 10%).
  EXPECT_GT(summary["test_accuracy"].get<double>(), 0.75);
  EXPECT_GT(summary["samples_per_second"].get<double>(), 0.0);
  EXPECT_EQ(summary["memory_format"], "channels_last");  // auto, convolutional model

  // auto threads and precision follow the machine this test runs on.
  Topology t = detect_topology();
  EXPECT_EQ(summary["threads"], t.usable_cores);
  // The test process reads the same LOOM_CPU_CAPABILITY as the run: a forced AVX2 or portable
  // path is named, and chooses precision as a host without AVX-512 would.
  const bool bf16 = t.cpu.native_bf16() && t.kernels == CpuCapability::kAvx512;
  EXPECT_EQ(summary["precision"], bf16 ? "bf16" : "fp32");
  EXPECT_EQ(summary["machine"]["cpu_capability"], std::string(to_string(t.kernels)));

  std::istringstream metrics(test::read_text(dir / "run/metrics.jsonl"));
  int steps = 0, epochs = 0;
  for (std::string line; std::getline(metrics, line);) {
    auto record = nlohmann::json::parse(line);
    if (record["type"] == "step") {
      ++steps;
      EXPECT_TRUE(std::isfinite(record["loss"].get<double>()));
      // Every instant of a step is charged to one phase: they sum to the step's wall time.
      double phases = 0;
      for (const auto& [name, seconds] : record["phase_seconds"].items()) {
        phases += seconds.get<double>();
      }
      const double wall = record["step_seconds"].get<double>();
      EXPECT_NEAR(phases, wall, 0.02 * wall) << line;
      EXPECT_GT(record["phase_seconds"]["forward"].get<double>(), 0.0);
      EXPECT_GT(record["phase_seconds"]["backward"].get<double>(), 0.0);
    } else if (record["type"] == "epoch") {
      ++epochs;
      EXPECT_TRUE(record.contains("test_accuracy"));
    }
  }
  EXPECT_EQ(steps, 3);
  EXPECT_EQ(epochs, 1);
  double shares = 0;
  for (const auto& [name, share] : summary["step_time"]["share"].items()) {
    shares += share.get<double>();
  }
  EXPECT_NEAR(shares, 1.0, 0.02) << summary["step_time"];
  EXPECT_GT(summary["step_time"]["seconds_per_step"].get<double>(), 0.0);
  // Model FLOPs utilisation: counted forward FLOPs (the default CNN: ~9.3 MFLOP a sample), a
  // calibrated peak, their ratio.
  const auto& mfu = summary["mfu"];
  EXPECT_NEAR(mfu["forward_flops_per_sample"].get<double>(), 9.3e6, 0.3e6) << mfu;
  EXPECT_GT(mfu["peak_flops_per_second"].get<double>(), 0.0);
  // Not bounded by 1 here: the peak is calibrated while ctest runs other tests on the same
  // cores, which can lower it more than the run's own rate.
  EXPECT_GT(mfu["mfu"].get<double>(), 0.0);
  // The CNN on in-memory Fashion-MNIST is compute-bound on a quiet host, but how long it waited
  // is measured: it is called input-bound when it waited 5% of the step or more (a margin
  // either side of the threshold for the summary's rounding).
  bool input_bound = false;
  for (const auto& f : summary["findings"]) input_bound = input_bound || f["id"] == "input_bound";
  const double waited = summary["step_time"]["share"]["data_wait"].get<double>();
  if (waited < 0.045) EXPECT_FALSE(input_bound) << summary["step_time"];
  if (waited > 0.055) EXPECT_TRUE(input_bound) << summary["step_time"];

  // TensorBoard scalars, written natively.
  std::string events;
  for (const auto& entry : std::filesystem::directory_iterator(dir / "run")) {
    if (entry.path().filename().string().rfind("events.out.tfevents.", 0) == 0) {
      events = test::read_text(entry.path().string());
    }
  }
  for (const char* tag : {"brain.Event:2", "train/loss", "step_share/data_wait", "test/accuracy"}) {
    EXPECT_NE(events.find(tag), std::string::npos) << tag;
  }

  // config.yaml holds every key and reproduces the run's configuration.
  auto resolved = test::run_loom("config " + (dir / "run/config.yaml"));
  ASSERT_EQ(resolved.exit_code, 0) << resolved.output;
  EXPECT_EQ(resolved.output, test::read_text(dir / "run/config.yaml"));
  auto as_json = test::run_loom("config --json " + (dir / "run/config.yaml"));
  ASSERT_EQ(as_json.exit_code, 0) << as_json.output;
  const auto config = test::json_line(as_json.output);
  EXPECT_EQ(config["train"]["max_steps"], 150);
  EXPECT_EQ(config["train"]["log_every"], 50);
  EXPECT_TRUE(std::filesystem::exists(dir / "run/checkpoints/step-00000150/model.safetensors"));
}

// `--trace` writes a Chrome trace: one process, the steps of the active window on the main
// thread with their phases nested inside, loader batches on other threads. A run killed midway
// leaves a trace that still parses.
TEST(TrainRun, TraceIsValidJsonWithNestedPhasesEvenWhenKilled) {
  test::TempDir dir;
  const std::string args = "train " + test::tiny_synthetic_args() +
                           " --trace --set profile.trace_wait=2 --set profile.trace_warmup=1"
                           " --set profile.trace_active=4 --set data.workers=2";
  auto r = test::run_loom(args + " --out " + (dir / "run"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto events = nlohmann::json::parse(test::read_text(dir / "run/trace.json"))["traceEvents"];
  std::vector<nlohmann::json> steps, phases;
  std::set<int> pids;
  std::set<std::string> counters;
  int main_tid = -1, loader_batches = 0;
  for (const auto& e : events) {
    pids.insert(e["pid"].get<int>());
    if (e["ph"] == "C") counters.insert(e["name"].get<std::string>());
    if (e["ph"] == "M" && e["name"] == "thread_name" && e["args"]["name"] == "main") {
      main_tid = e["tid"];
    }
    if (e["ph"] != "X") continue;
    if (e["cat"] == "step") steps.push_back(e);
    if (e["cat"] == "phase") phases.push_back(e);
    if (e["cat"] == "loader") ++loader_batches;
  }
  EXPECT_EQ(pids, std::set<int>{0});
  EXPECT_EQ(counters, (std::set<std::string>{"prefetched batches", "process CPU (cores)",
                                             "loader threads busy"}));
  ASSERT_EQ(steps.size(), 4u);
  EXPECT_EQ(steps[0]["name"], "step 4");  // after 2 waiting and 1 warm-up step
  EXPECT_GT(loader_batches, 0);
  for (const auto& p : phases) {
    EXPECT_EQ(p["tid"], main_tid);
    const auto inside = std::find_if(steps.begin(), steps.end(), [&](const nlohmann::json& s) {
      return p["ts"].get<int64_t>() >= s["ts"].get<int64_t>() &&
             p["ts"].get<int64_t>() + p["dur"].get<int64_t>() <=
                 s["ts"].get<int64_t>() + s["dur"].get<int64_t>() + 1;
    });
    EXPECT_NE(inside, steps.end()) << "phase slice outside every step: " << p;
  }

  auto killed = test::run_loom(args + " --out " + (dir / "killed") +
                                   " --set profile.trace_active=100 --set checkpoint.every_steps=6",
                               "LOOM_FAULT_STOP_AFTER_STEP=6");
  EXPECT_EQ(killed.signal, SIGKILL) << killed.output;
  const auto partial = nlohmann::json::parse(test::read_text(dir / "killed/trace.json"));
  EXPECT_GE(partial["traceEvents"].size(), 4u);
}

// The caching allocator changes where tensors live, never what is computed.
TEST(TrainRun, CachingAndSystemAllocatorsTrainIdentically) {
  test::TempDir dir;
  std::string bytes[2];
  const char* allocators[] = {"caching", "system"};
  for (int i = 0; i < 2; ++i) {
    const std::string out = dir / allocators[i];
    auto r = test::run_loom("train --out " + out + " " + test::tiny_synthetic_args() +
                            " --set train.epochs=1 --set runtime.allocator=" + allocators[i]);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    auto summary = nlohmann::json::parse(test::read_text(out + "/summary.json"));
    EXPECT_EQ(summary["memory"]["allocator"], allocators[i]);
    bytes[i] = test::read_text(out + "/checkpoints/step-00000016/model.safetensors");
  }
  ASSERT_FALSE(bytes[0].empty());
  EXPECT_TRUE(bytes[0] == bytes[1]);
}

TEST(TrainRun, ResNet18OnSyntheticData) {
  test::TempDir dir;
  auto r = test::run_loom(
      "train --out " + (dir / "run") +
      " --set model=resnet18 --set data=synthetic --set data.image_size=32 "
      "--set data.train_samples=64 --set data.test_samples=16 "
      "--set data.batch_size=16 --set train.max_steps=2 --set checkpoint.enabled=false");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto summary = nlohmann::json::parse(test::read_text(dir / "run/summary.json"));
  EXPECT_EQ(summary["model"], "resnet18");
  EXPECT_EQ(summary["parameters"], 11181642);  // ResNet-18 with a 10-class head
  EXPECT_EQ(summary["steps"], 2);
  EXPECT_FALSE(std::filesystem::exists(dir / "run/checkpoints/latest"));
}

}  // namespace
}  // namespace loom
