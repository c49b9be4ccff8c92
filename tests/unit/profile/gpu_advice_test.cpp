// The advisor on a GPU (profile/gpu_advice.h): the CPU's rules silent, and the GPU's findings.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "loom/profile/advisor.h"
#include "unit/profile/advisor_runs.h"

namespace loom::profile {
namespace {

// A run on a GPU, at the calibrated peak's share `mfu`, otherwise as run_waiting(0).
RunProfile run_on_gpu(double mfu) {
  RunProfile r = run_waiting(0);
  r.device = "cuda:0";
  r.mfu = mfu;
  r.native_bf16 = true;  // bf16 tensor cores (compute capability 8.0 on)
  return r;
}

// What the host's CPU did says nothing of a GPU's step: with the CPU mostly idle, few compute
// threads, fp32 products on the reference BLAS, none of the CPU's rules speaks.
TEST(Advisor, OnAGpuTheCpusRulesAreSilent) {
  RunProfile r = run_on_gpu(0.4);
  r.compute_threads = 1;
  r.loader_decodes = false;
  r.cpu_utilisation = 0.05;
  r.batch_size = 48;
  r.blas = "reference";
  EXPECT_TRUE(advise(r).empty()) << advise(r).front().id;
  r.device = "cpu";  // the same figures on the CPU
  const auto findings = advise(r);
  EXPECT_NE(find(findings, "threads"), nullptr);
  EXPECT_NE(find(findings, "low_utilisation"), nullptr);
}

TEST(Advisor, OnAGpuFp32AndNchwAreNamedForTheGpu) {
  RunProfile r = run_on_gpu(0.4);
  r.precision = "fp32";
  r.memory_format = "contiguous";
  const auto findings = advise(r);
  const Finding* precision = find(findings, "precision");
  ASSERT_NE(precision, nullptr);
  EXPECT_EQ(precision->severity, "high");
  EXPECT_EQ(precision->key, "runtime.precision");
  EXPECT_EQ(precision->suggested, "bf16");
  const Finding* layout = find(findings, "memory_format");
  ASSERT_NE(layout, nullptr);
  EXPECT_EQ(layout->suggested, "channels_last");
  EXPECT_EQ(find(findings, "reference_blas"), nullptr);
  r.native_bf16 = false;  // a GPU without bf16 tensor cores (a T4, a V100): no bf16 to suggest
  EXPECT_EQ(find(advise(r), "precision"), nullptr);
}

// fp16 where the tensor cores compute bf16 as fast: bf16 needs no loss scale (a low finding).
TEST(Advisor, OnAGpuWithBf16Fp16IsToldOfBf16) {
  RunProfile r = run_on_gpu(0.4);
  r.precision = "fp16";
  const auto findings = advise(r);
  const Finding* precision = find(findings, "precision");
  ASSERT_NE(precision, nullptr);
  EXPECT_EQ(precision->severity, "low");
  EXPECT_EQ(precision->suggested, "bf16");
  r.native_bf16 = false;  // a V100's fp16 is its fastest
  EXPECT_EQ(find(advise(r), "precision"), nullptr);
}

// Low MFU with its likely cause, the first that holds of: fp32, the input, a small batch, else
// launch-bound small kernels.
TEST(Advisor, OnAGpuLowMfuNamesItsLikelyCause) {
  EXPECT_EQ(find(advise(run_on_gpu(0.30)), "low_mfu"), nullptr);
  EXPECT_EQ(find(advise(run_on_gpu(0)), "low_mfu"), nullptr);  // not measured
  EXPECT_EQ(find(advise(run_on_gpu(0.2)), "low_mfu")->severity, "moderate");
  const auto findings = advise(run_on_gpu(0.05));
  const Finding* launch_bound = find(findings, "low_mfu");
  ASSERT_NE(launch_bound, nullptr);
  EXPECT_EQ(launch_bound->severity, "high");
  EXPECT_EQ(launch_bound->key, "data.batch_size");
  EXPECT_DOUBLE_EQ(launch_bound->measured.at("mfu"), 0.05);

  RunProfile small = run_on_gpu(0.15);
  small.batch_size = 8;
  EXPECT_EQ(find(advise(small), "low_mfu")->key, "data.batch_size");
  EXPECT_EQ(find(advise(small), "low_mfu")->measured.at("batch_size"), 8);

  RunProfile starved = run_on_gpu(0.15);
  starved.step_times.seconds[static_cast<size_t>(Phase::kDataWait)] = 0.3;
  starved.step_times.seconds[static_cast<size_t>(Phase::kForward)] = 0.7;
  const auto starved_findings = advise(starved);
  EXPECT_EQ(find(starved_findings, "low_mfu")->key, "data.workers");
  EXPECT_NE(find(starved_findings, "input_bound"), nullptr);  // the phase rule applies too

  RunProfile fp32 = starved;
  fp32.precision = "fp32";
  EXPECT_EQ(find(advise(fp32), "low_mfu")->key, "runtime.precision");
  fp32.native_bf16 = false;  // nothing faster to compute in: the input it is
  EXPECT_EQ(find(advise(fp32), "low_mfu")->key, "data.workers");
}

TEST(Advisor, OnAGpuNearlyFullMemoryIsNamed) {
  RunProfile r = run_on_gpu(0.4);
  r.device_memory_bytes = 80e9;
  r.device_peak_reserved_bytes = 70e9;
  EXPECT_EQ(find(advise(r), "device_memory"), nullptr);
  r.device_peak_reserved_bytes = 75e9;
  const auto findings = advise(r);
  const Finding* f = find(findings, "device_memory");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->key, "train.activation_checkpointing");
  EXPECT_NEAR(f->measured.at("device_memory_share"), 75.0 / 80.0, 1e-12);
  r.recompute = true;
  EXPECT_EQ(find(advise(r), "device_memory")->key, "data.batch_size");
}

// Host synchronisations a step: none counted (the CPU, or too few) is no finding; fp16's one
// loss-scale check is left out; one more is moderate, four high, by phase.
TEST(Advisor, OnAGpuHostSynchronisationsInTheStepAreNamedByPhase) {
  RunProfile r = run_on_gpu(0.4);
  EXPECT_EQ(find(advise(r), "host_sync"), nullptr);  // not counted
  r.host_syncs.steps = 20;
  r.host_syncs.by_phase[static_cast<size_t>(Phase::kOptimizer)] = 20;  // one a step
  r.precision = "fp16";
  EXPECT_EQ(find(advise(r), "host_sync"), nullptr);  // the loss scale's check
  r.precision = "bf16";
  const auto found = advise(r);
  const Finding* one = find(found, "host_sync");
  ASSERT_NE(one, nullptr);
  EXPECT_EQ(one->severity, "moderate");
  EXPECT_EQ(one->measured.at("syncs_per_step"), 1.0);
  EXPECT_EQ(one->measured.at("optimizer_syncs_per_step"), 1.0);
  r.host_syncs.by_phase[static_cast<size_t>(Phase::kBackward)] = 60;
  const auto findings = advise(r);
  const Finding* four = find(findings, "host_sync");
  ASSERT_NE(four, nullptr);
  EXPECT_EQ(four->severity, "high");
  EXPECT_EQ(four->measured.at("backward_syncs_per_step"), 3.0);
  EXPECT_EQ(four->measured.at("counted_steps"), 20.0);
  EXPECT_EQ(four->measured.count("forward_syncs_per_step"), 0u);
  r.device = "cpu";  // a GPU's rule
  EXPECT_EQ(find(advise(r), "host_sync"), nullptr);
}

}  // namespace
}  // namespace loom::profile
