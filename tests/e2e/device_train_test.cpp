// `loom train`'s runtime.device: where a run trains, chosen and recorded with its reason, and
// refused with the key where it cannot be. Where a GPU is present: the same training as the
// CPU's (fp32, 1e-4 apart), checkpoints that move between the two (a run killed on one resumed
// on the other, both ways), and data parallelism on GPUs equal to one rank (two ranks sharing a
// GPU; NCCL where there are two GPUs); elsewhere those tests skip, saying why.
#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "e2e/json_output.h"
#include "e2e/language_model_fixture.h"
#include "loom/core/device.h"
#include "tools/run_compare.h"
#include "tools/test_support.h"

namespace loom::test {
namespace {

// A small CNN on synthetic images, eight steps of SGD in fp32 with an evaluation and a
// checkpoint at step 4 and at the end. Without dropout: the CNN draws torch's, whose masks come
// from each device's own generator.
std::string cnn_args() {
  return " " + tiny_synthetic_args() +
         " --set runtime.precision=fp32 --set model.dropout=0 --set train.max_steps=8"
         " --set checkpoint.every_steps=4";
}

bool have_gpu() { return cuda_availability().devices > 0; }

// The step records of metrics.jsonl in `run` that split their steps on the device's clock.
int device_step_records(const std::string& run) {
  int records = 0;
  std::istringstream lines(read_text(run + "/metrics.jsonl"));
  for (std::string line; std::getline(lines, line);) {
    const auto record = nlohmann::json::parse(line);
    if (record["type"] == "step" && record.contains("device_phase_seconds")) ++records;
  }
  return records;
}

TEST(DeviceTrain, AValueThatIsNoDeviceExitsTwoNamingTheKey) {
  TempDir dir;
  const auto run =
      run_loom_reporting("train --out " + (dir / "run") + cnn_args() + " --set runtime.device=gpu");
  EXPECT_EQ(run.result.exit_code, 2) << run.result.output;
  EXPECT_EQ(run.error["fields"]["key"], "runtime.device") << run.error;
  EXPECT_EQ(run.error["fields"]["problem"], "device") << run.error;
  EXPECT_FALSE(std::filesystem::exists((dir / "run") + "/summary.json"));
}

TEST(DeviceTrain, WithoutAGpuCudaExitsTwoAndAutoTrainsOnTheCpu) {
  if (have_gpu()) GTEST_SKIP() << "this host has a GPU";
  TempDir dir;
  const auto cuda = run_loom_reporting("train --out " + (dir / "cuda") + cnn_args() +
                                       " --set runtime.device=cuda");
  EXPECT_EQ(cuda.result.exit_code, 2) << cuda.result.output;
  EXPECT_EQ(cuda.error["fields"]["key"], "runtime.device") << cuda.error;
  EXPECT_EQ(cuda.error["fields"]["problem"], "no_cuda") << cuda.error;

  const auto autos =
      run_loom("train --out " + (dir / "auto") + cnn_args() + " --set runtime.device=auto");
  ASSERT_EQ(autos.exit_code, 0) << autos.output;
  const auto summary = summary_of(dir / "auto");
  EXPECT_EQ(summary["device"], "cpu");
  EXPECT_EQ(summary["choices"]["device"].get<std::string>().rfind("auto: ", 0), 0u) << summary;
  EXPECT_EQ(summary["memory"]["device_peak_allocated_bytes"], 0);
  EXPECT_TRUE(summary["step_time"]["device"].is_null()) << summary["step_time"];
  EXPECT_TRUE(summary["host_syncs"].is_null()) << summary["host_syncs"];
  EXPECT_EQ(device_step_records(dir / "auto"), 0);
  // The same run as the CPU's by default.
  const auto cpu = run_loom("train --out " + (dir / "cpu") + cnn_args());
  ASSERT_EQ(cpu.exit_code, 0) << cpu.output;
  EXPECT_EQ(summary_of(dir / "cpu")["choices"]["device"], "set in runtime.device");
  expect_same_model(dir / "auto", dir / "cpu", 0);
}

// runtime.deterministic on the CPU, whose kernels here are deterministic already: the same
// training, bit for bit, and the summary says it was asked for.
TEST(DeviceTrain, DeterministicAlgorithmsTrainAsTheDefaultOnTheCpu) {
  TempDir dir;
  const auto plain = run_loom("train --out " + (dir / "plain") + cnn_args());
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  const auto strict = run_loom("train --out " + (dir / "strict") + cnn_args() +
                               " --set runtime.deterministic=true");
  ASSERT_EQ(strict.exit_code, 0) << strict.output;
  EXPECT_EQ(summary_of(dir / "strict")["deterministic"], true);
  EXPECT_EQ(summary_of(dir / "plain")["deterministic"], false);
  expect_same_model(dir / "strict", dir / "plain", 0);
}

// On a GPU with deterministic algorithms, a run killed at step 4 and resumed ends with the
// uninterrupted run's parameters, bit for bit: the checkpoint carries the GPU's generator, from
// which the CNN's dropout draws.
TEST(DeviceTrain, OnAGpuAResumedRunEqualsAnUninterruptedOne) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device: " << cuda_availability().why_not;
  TempDir dir;
  const std::string args = " " + tiny_synthetic_args() +
                           " --set runtime.precision=fp32 --set model.dropout=0.25"
                           " --set train.max_steps=8 --set checkpoint.every_steps=4"
                           " --set runtime.device=cuda --set runtime.deterministic=true";
  const auto straight = run_loom("train --out " + (dir / "straight") + args);
  ASSERT_EQ(straight.exit_code, 0) << straight.output;
  auto run = run_loom("train --out " + (dir / "resumed") + args, "LOOM_FAULT_STOP_AFTER_STEP=4");
  ASSERT_EQ(run.signal, SIGKILL) << run.output;
  run = run_loom("train --out " + (dir / "resumed") + args + " --resume");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(summary_of(dir / "resumed")["resumed_from_step"], 4);
  expect_same_model(dir / "resumed", dir / "straight", 0);
}

// A GPU run's steady steps on the GPU's clock too: the same steps as the host's, each phase's
// share of them, forward and backward some of it.
void expect_device_step_times(const nlohmann::json& summary) {
  const auto& device = summary["step_time"]["device"];
  ASSERT_TRUE(device.is_object()) << summary["step_time"];
  EXPECT_EQ(device["steps"], summary["step_time"]["steps"]);
  EXPECT_GT(device["seconds_per_step"].get<double>(), 0.0);
  double shares = 0;
  for (const auto& [phase, share] : device["share"].items()) shares += share.get<double>();
  EXPECT_NEAR(shares, 1.0, 1e-6) << device;
  EXPECT_GT(device["share"]["forward"].get<double>(), 0.0) << device;
  EXPECT_GT(device["share"]["backward"].get<double>(), 0.0) << device;
}

// The GPU's run against the CPU's, and a checkpoint carried from one to the other halfway.
void expect_gpu_trains_as_the_cpu(const std::string& args, const TempDir& dir) {
  const auto cpu = run_loom("train --out " + (dir / "cpu") + args);
  ASSERT_EQ(cpu.exit_code, 0) << cpu.output;
  const auto gpu = run_loom("train --out " + (dir / "gpu") + args + " --set runtime.device=cuda");
  ASSERT_EQ(gpu.exit_code, 0) << gpu.output;
  const auto summary = summary_of(dir / "gpu");
  EXPECT_EQ(summary["device"], "cuda:0");
  EXPECT_GT(summary["memory"]["device_peak_allocated_bytes"].get<int64_t>(), 0);
  expect_device_step_times(summary);
  EXPECT_TRUE(summary_of(dir / "cpu")["step_time"]["device"].is_null());
  EXPECT_GE(device_step_records(dir / "gpu"), 1);
  EXPECT_EQ(device_step_records(dir / "cpu"), 0);
  // No step waits for the GPU on the host: torch's synchronisation warnings counted none.
  ASSERT_TRUE(summary["host_syncs"].is_object()) << summary;
  EXPECT_GT(summary["host_syncs"]["steps"].get<int64_t>(), 0);
  EXPECT_EQ(summary["host_syncs"]["per_step"], 0.0) << summary["host_syncs"];
  EXPECT_TRUE(summary_of(dir / "cpu")["host_syncs"].is_null());
  expect_same_model(dir / "gpu", dir / "cpu", 1e-4);

  // Written on the GPU at step 4, resumed on the CPU; and the other way.
  const std::string on_gpu = " --set runtime.device=cuda";
  for (const auto& [first, then] :
       {std::pair{on_gpu, std::string()}, std::pair{std::string(), on_gpu}}) {
    SCOPED_TRACE(first.empty() ? "cpu -> gpu" : "gpu -> cpu");
    const std::string folder = dir / (first.empty() ? "to_gpu" : "to_cpu");
    auto run = run_loom("train --out " + folder + args + first, "LOOM_FAULT_STOP_AFTER_STEP=4");
    ASSERT_EQ(run.signal, SIGKILL) << run.output;
    run = run_loom("train --out " + folder + args + then + " --resume");
    ASSERT_EQ(run.exit_code, 0) << run.output;
    EXPECT_EQ(summary_of(folder)["resumed_from_step"], 4);
    expect_same_model(folder, dir / "cpu", 1e-4);
  }
}

TEST(DeviceTrain, OnAGpuACnnTrainsAsOnTheCpu) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device: " << cuda_availability().why_not;
  TempDir dir;
  expect_gpu_trains_as_the_cpu(cnn_args(), dir);
}

// A GPU run's trace draws each traced step's phases on the GPU's clock too, on a track of the
// device's own: as many steps as the host's, each starting once the host's has (the GPU runs what
// the host queued) and well within a second of it (the clocks are put on one axis as the trace
// starts, and this small CNN's GPU keeps up with its host), with forward and backward in them.
TEST(DeviceTrain, OnAGpuTheTraceDrawsTheDevicesPhasesOnItsOwnTrack) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device: " << cuda_availability().why_not;
  TempDir dir;
  const auto run = run_loom("train --out " + (dir / "run") + cnn_args() +
                            " --set runtime.device=cuda --trace --set profile.trace_wait=2"
                            " --set profile.trace_warmup=1 --set profile.trace_active=3");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const auto events = nlohmann::json::parse(read_text(dir / "run/trace.json"))["traceEvents"];
  int64_t device_track = -1;
  for (const auto& e : events) {
    if (e["ph"] == "M" && e["name"] == "thread_name" &&
        e["args"]["name"] == "cuda:0 (the device's clock)") {
      device_track = e["tid"];
    }
  }
  ASSERT_GE(device_track, 0);
  std::map<std::string, int64_t> host_begins, device_begins, device_ends;
  std::vector<std::pair<int64_t, int64_t>> phase_spans;  // microseconds
  std::set<std::string> device_phases;
  for (const auto& e : events) {
    if (e["ph"] != "X") continue;
    const std::string name = e["name"];
    const int64_t ts = e["ts"], dur = e["dur"];
    if (e["cat"] == "step") host_begins[name] = ts;
    if (e["tid"] != device_track) continue;
    if (e["cat"] == "device step") device_begins[name] = ts, device_ends[name] = ts + dur;
    if (e["cat"] == "device phase") device_phases.insert(name), phase_spans.emplace_back(ts, dur);
  }
  ASSERT_EQ(device_begins.size(), 3u);
  for (const auto& [step, begin] : device_begins) {
    ASSERT_TRUE(host_begins.count(step)) << step;
    EXPECT_GE(begin, host_begins[step]) << step;
    EXPECT_LT(begin, host_begins[step] + 1'000'000) << step;
  }
  EXPECT_TRUE(device_phases.count("forward"));
  EXPECT_TRUE(device_phases.count("backward"));
  // Each phase inside a step of the device's (to the microsecond the trace rounds to).
  for (const auto& [ts, dur] : phase_spans) {
    bool inside = false;
    for (const auto& [step, begin] : device_begins) {
      inside = inside || (ts >= begin - 1 && ts + dur <= device_ends[step] + 1);
    }
    EXPECT_TRUE(inside) << ts << " + " << dur;
  }
}

// Data parallelism on GPUs against one rank on a GPU with the same global batch (fp32, no
// dropout: only the split of the batch differs), as on the CPU (data_parallel_train_test).
// `servers`: parameter-server ranks launched beside the two (on the CPU), which `layout` uses.
void expect_two_ranks_train_as_one(const std::string& devices, const std::string& backend,
                                   const TempDir& dir, const std::string& layout = "",
                                   int servers = 0) {
  // Checkpoints at the end only: the comparison reads them.
  const std::string args = tiny_synthetic_args() +
                           " --set model=mlp --set model.dropout=0 --set runtime.precision=fp32"
                           " --set train.max_steps=8 --set checkpoint.every_steps=0";
  const auto one = run_loom("train " + args + " --set runtime.device=cuda:0" +
                            " --set data.batch_size=32 --out " + (dir / "one"));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const auto two =
      run_loom("launch --nproc-per-node 2 --servers " + std::to_string(servers) + " -- " +
               loom_binary() + " train " + args + layout + " --set runtime.device=" + devices +
               " --set data.global_batch=32 --out " + (dir / "two"));
  ASSERT_EQ(two.exit_code, 0) << two.output;
  const auto summary = summary_of(dir / "two");
  EXPECT_EQ(summary["data_parallel"]["ranks"], 2);
  if (!backend.empty()) {
    EXPECT_EQ(summary["data_parallel"]["backend"], backend);
  }
  // Through host memory, each bucket's copy to the host waits for the GPU: the counter sees it.
  if (backend.find("via host") != std::string::npos) {
    EXPECT_GT(summary["host_syncs"]["per_step"].get<double>(), 0.0) << summary["host_syncs"];
  }
  expect_same_model(dir / "two", dir / "one", 1e-4);
}

// Two ranks sharing one GPU (cuda:0 for both): NCCL drives one GPU per rank, so the gradient
// buckets go through host memory over shm.
TEST(DeviceTrain, OnAGpuTwoRanksSharingItTrainAsOne) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device: " << cuda_availability().why_not;
  TempDir dir;
  expect_two_ranks_train_as_one("cuda:0", "cpu:shm,cuda:shm via host", dir);
}

// ZeRO's buckets and shards on the GPU, two ranks sharing it: each stage ends as one rank, its
// checkpoint gathered from both ranks' shards (through host memory, where the writer takes them).
TEST(DeviceTrain, OnAGpuTwoRanksSharingItTrainAsOneUnderEveryZeroStage) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device: " << cuda_availability().why_not;
  for (const int zero : {1, 2, 3}) {
    SCOPED_TRACE("parallel.zero " + std::to_string(zero));
    TempDir dir;
    expect_two_ranks_train_as_one("cuda:0", "cpu:shm,cuda:shm via host", dir,
                                  " --set parallel.zero=" + std::to_string(zero));
    EXPECT_EQ(summary_of(dir / "two")["layout"]["zero"], zero);
  }
}

// Parameter servers (on the CPU) for two workers sharing the GPU: synchronous (the buckets'
// parts pushed from the GPU through host memory), and at a staleness of 0 with the optimizer on
// the workers (their moves pushed) and on the servers (gradients pushed): each as one rank.
TEST(DeviceTrain, OnAGpuTwoWorkersOfParameterServersTrainAsOne) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device: " << cuda_availability().why_not;
  const std::string ps = " --set parallel.mode=ps --set parallel.ps.servers=1";
  for (const std::string& mode :
       {std::string(), std::string(" --set parallel.ps.mode=ssp"),
        std::string(" --set parallel.ps.mode=ssp --set parallel.ps.optimizer_on=server")}) {
    SCOPED_TRACE(mode);
    TempDir dir;
    expect_two_ranks_train_as_one("cuda:0", "", dir, ps + mode, 1);
    const auto summary = summary_of(dir / "two");
    EXPECT_EQ(summary["parameter_servers"]["workers"], 2) << summary["parameter_servers"];
    EXPECT_EQ(summary["device"], "cuda:0");
  }
}

// Each rank on its own GPU (cuda: the local rank's), over NCCL.
TEST(DeviceTrain, OnTwoGpusNcclTrainsAsOne) {
  if (cuda_availability().devices < 2) {
    GTEST_SKIP() << "needs two CUDA devices; this host has " << cuda_availability().devices
                 << (have_gpu() ? "" : ": " + cuda_availability().why_not);
  }
  TempDir dir;
  expect_two_ranks_train_as_one("cuda", "cpu:shm,cuda:nccl", dir);
}

// The language-model fixture where there is a GPU; elsewhere it tokenizes nothing (every test
// process of the suite would pay for it) and its tests skip.
class GpuLanguageModelTrain : public LanguageModelTrain {
 protected:
  static void SetUpTestSuite() {
    if (!have_gpu()) {
      skip_ = "no CUDA device: " + cuda_availability().why_not;
      return;
    }
    LanguageModelTrain::SetUpTestSuite();
  }
  static void TearDownTestSuite() {
    LanguageModelTrain::TearDownTestSuite();
    skip_.clear();  // shared with the other language-model suites of this process
  }
};

TEST_F(GpuLanguageModelTrain, OnAGpuAGptTrainsAsOnTheCpu) {
  TempDir dir;
  expect_gpu_trains_as_the_cpu(gpt_args() + " --set checkpoint.every_steps=4", dir);
}

// A tensor group of two ranks sharing the GPU (its activations and slices through host memory)
// against one rank there; its checkpoint made whole from both ranks' slices.
TEST_F(GpuLanguageModelTrain, OnAGpuATensorGroupSharingItTrainsAsOneRank) {
  TempDir dir;
  const std::string on_gpu = gpt_args() + " --set runtime.device=cuda:0";
  const auto one = run_loom("train --out " + (dir / "one") + on_gpu);
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const auto two = run_loom(launch(2, on_gpu + " --set parallel.tensor=2 --out " + (dir / "two")));
  ASSERT_EQ(two.exit_code, 0) << two.output;
  EXPECT_EQ(summary_of(dir / "two")["tensor_parallel"]["ranks"], 2) << two.output;
  expect_like(dir / "two", dir / "one");
}

// Two pipeline stages sharing the GPU (their activations and gradients through host memory, the
// embedding tied across them) against one rank accumulating as many micro-batches; the
// checkpoint made of both stages.
TEST_F(GpuLanguageModelTrain, OnAGpuTwoPipelineStagesSharingItTrainAsOneRank) {
  TempDir dir;
  const std::string on_gpu = gpt_args() + " --set runtime.device=cuda:0";
  const auto one = run_loom("train --out " + (dir / "one") + on_gpu + accumulating(2, 4));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const auto two =
      run_loom(launch(2, on_gpu + pipelined(2, 4, "1f1b") + " --out " + (dir / "two")));
  ASSERT_EQ(two.exit_code, 0) << two.output;
  EXPECT_EQ(summary_of(dir / "two")["pipeline"]["ranks"], 2) << two.output;
  expect_like(dir / "two", dir / "one");
}

}  // namespace
}  // namespace loom::test
