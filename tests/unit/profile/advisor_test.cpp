#include "loom/profile/advisor.h"

#include <gtest/gtest.h>

namespace loom::profile {
namespace {

// A run of 100 steps of 10 ms with the given share of each step waiting for data.
RunProfile run_waiting(double data_wait_share) {
  RunProfile r;
  r.steps = 100;
  r.step_times.wall = 1.0;
  r.step_times.seconds[static_cast<size_t>(Phase::kDataWait)] = data_wait_share;
  r.step_times.seconds[static_cast<size_t>(Phase::kForward)] = 1.0 - data_wait_share;
  r.usable_cores = 2;
  r.compute_threads = 2;
  r.loader_threads = 1;
  r.loader_decodes = true;
  r.precision = "bf16";
  r.native_bf16 = true;
  r.memory_format = "channels_last";
  r.convolutional = true;
  r.batch_size = 64;
  return r;
}

const Finding* find(const std::vector<Finding>& findings, const std::string& id) {
  for (const auto& f : findings) {
    if (f.id == id) return &f;
  }
  return nullptr;
}

TEST(Advisor, InputBoundThresholdsAndGainBound) {
  EXPECT_EQ(find(advise(run_waiting(0.04)), "input_bound"), nullptr);
  const auto moderate = advise(run_waiting(0.10));
  ASSERT_NE(find(moderate, "input_bound"), nullptr);
  EXPECT_EQ(find(moderate, "input_bound")->severity, "moderate");
  const auto high = advise(run_waiting(0.50));
  const Finding* f = find(high, "input_bound");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->severity, "high");
  EXPECT_EQ(f->key, "data.workers");
  EXPECT_DOUBLE_EQ(f->max_gain, 2.0);  // removing half of the step at most doubles the rate
  EXPECT_NE(f->evidence.find("data_wait is 50% of the step (5.0 ms of 10.0 ms)"), std::string::npos)
      << f->evidence;
  EXPECT_NE(f->advice.find("data.workers is 1 of 2"), std::string::npos) << f->advice;
  // With every core already decoding, more threads cannot help: the transforms can.
  RunProfile busy = run_waiting(0.5);
  busy.loader_threads = 2;
  EXPECT_EQ(find(advise(busy), "input_bound")->key, "data.transforms");
  // After --autotune measured the split, the advice is about the work, not the threads.
  RunProfile tuned = run_waiting(0.5);
  tuned.threads_tuned = true;
  const auto tuned_findings = advise(tuned);
  const Finding* after = find(tuned_findings, "input_bound");
  ASSERT_NE(after, nullptr);
  EXPECT_EQ(after->key, "data.transforms");
  EXPECT_NE(after->advice.find("autotuner already chose"), std::string::npos) << after->advice;
}

TEST(Advisor, InputBoundSaysHowManyDataWorkersWouldFeedTheModel) {
  // Half of every step waiting at 100 samples/s: the model would consume 200.
  RunProfile r = run_waiting(0.5);
  r.loader_threads = 2;  // every core already builds batches
  r.samples_per_second = 100;
  r.loader_cpu_seconds_per_sample = 0.02;  // so a worker with this host's 2 cores makes 100/s
  const auto estimated = advise(r);
  const Finding* f = find(estimated, "input_bound");
  ASSERT_NE(f, nullptr);
  EXPECT_NE(f->advice.find("consume 200 samples/s and one data worker supplies 100 samples/s "
                           "(estimated for a worker with this host's 2 cores), so 2 remote data "
                           "workers"),
            std::string::npos)
      << f->advice;
  // With workers in the run, their measured rate decides: ceil(200 / 80) = 3.
  r.remote_workers = 1;
  r.remote_worker_samples_per_second = 80;
  const auto measured = advise(r);
  f = find(measured, "input_bound");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->key, "data.remote.workers");
  EXPECT_NE(f->advice.find("supplies 80 samples/s (as measured), so 3 remote data workers"),
            std::string::npos)
      << f->advice;
  EXPECT_NE(f->advice.find("it had 1"), std::string::npos) << f->advice;
  // Not input-bound: no sizing at all.
  RunProfile fed = run_waiting(0.01);
  fed.samples_per_second = 100;
  fed.loader_cpu_seconds_per_sample = 0.02;
  EXPECT_EQ(find(advise(fed), "input_bound"), nullptr);
}

TEST(Advisor, SettingsFindingsNameTheirKeys) {
  EXPECT_TRUE(advise(run_waiting(0)).empty()) << advise(run_waiting(0)).front().id;
  RunProfile r = run_waiting(0);
  r.precision = "fp32";
  r.memory_format = "contiguous";
  r.compute_threads = 1;
  r.loader_decodes = false;
  r.memory_fraction = 0.95;
  r.cpu_utilisation = 0.3;
  r.batch_size = 16;
  const auto findings = advise(r);
  EXPECT_EQ(find(findings, "precision")->key, "runtime.precision");
  EXPECT_EQ(find(findings, "memory_format")->key, "runtime.memory_format");
  EXPECT_EQ(find(findings, "threads")->key, "runtime.threads");
  EXPECT_EQ(find(findings, "memory")->severity, "high");
  EXPECT_EQ(find(findings, "low_utilisation")->key, "data.batch_size");
  r.threads_tuned = true;  // measured: fewer compute threads were faster
  EXPECT_EQ(find(advise(r), "threads"), nullptr);
  r.threads_tuned = false;
  r.native_bf16 = false;  // fp32 is right without native bf16
  EXPECT_EQ(find(advise(r), "precision"), nullptr);
}

TEST(Advisor, ExposedCommunication) {
  RunProfile r = run_waiting(0);
  r.step_times.seconds[static_cast<size_t>(Phase::kForward)] = 0.8;
  r.step_times.seconds[static_cast<size_t>(Phase::kCommExposed)] = 0.2;
  const auto findings = advise(r);
  const Finding* f = find(findings, "exposed_comm");
  ASSERT_NE(f, nullptr);
  EXPECT_DOUBLE_EQ(f->max_gain, 1.25);
  EXPECT_EQ(f->key, "data.batch_size");  // gradient exchange: more compute per byte
  r.pipeline_ranks = 2;                  // a pipeline's transfers between stages instead
  r.pipeline_microbatches = 8;
  const auto piped_findings = advise(r);
  const Finding* piped = find(piped_findings, "exposed_comm");
  ASSERT_NE(piped, nullptr);
  EXPECT_EQ(piped->key, "parallel.pipeline.microbatches");
}

// The bubble names the micro-batch count the plan simulated, when it found one.
TEST(Advisor, PipelineBubble) {
  RunProfile r = run_waiting(0);
  r.pipeline_ranks = 2;
  r.pipeline_microbatches = 4;
  r.step_times.seconds[static_cast<size_t>(Phase::kForward)] = 0.95;
  r.step_times.seconds[static_cast<size_t>(Phase::kBubble)] = 0.05;
  EXPECT_EQ(find(advise(r), "pipeline_bubble"), nullptr);

  r.step_times.seconds[static_cast<size_t>(Phase::kForward)] = 0.69;
  r.step_times.seconds[static_cast<size_t>(Phase::kBubble)] = 0.31;
  const auto general_findings = advise(r);
  const Finding* general = find(general_findings, "pipeline_bubble");
  ASSERT_NE(general, nullptr);
  EXPECT_EQ(general->severity, "high");
  EXPECT_NE(general->advice.find("microbatches is 4"), std::string::npos) << general->advice;

  r.better_microbatches = 16;
  r.better_bubble = 0.12;
  const auto findings = advise(r);
  const Finding* f = find(findings, "pipeline_bubble");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->evidence, "bubble is 31% of the step (3.1 ms of 10.0 ms)");
  EXPECT_EQ(f->advice, "raise parallel.pipeline.microbatches to 16 (predicted bubble 12%)");
  EXPECT_EQ(f->key, "parallel.pipeline.microbatches");
  EXPECT_NEAR(f->max_gain, 1 / 0.69, 1e-9);
}

TEST(Advisor, AWorkerTwentyPercentSlowerThanTheMedianIsAStraggler) {
  RunProfile r = run_waiting(0.0);
  r.worker_compute_seconds = {10.0, 10.5, 11.9, 9.8};  // the slowest 17% above the median
  EXPECT_EQ(find(advise(r), "straggler"), nullptr);
  r.worker_compute_seconds = {10.0, 10.5, 13.0, 9.8};
  const auto findings = advise(r);
  const Finding* f = find(findings, "straggler");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->severity, "moderate");
  EXPECT_NE(f->evidence.find("worker rank 2 computed for 13000.0 ms, the median worker 10000.0 ms "
                             "(30% slower)"),
            std::string::npos)
      << f->evidence;
  EXPECT_NEAR(f->max_gain, 1.3, 1e-9);
  r.worker_compute_seconds = {10.0};  // one worker waits for nobody
  EXPECT_EQ(find(advise(r), "straggler"), nullptr);
}

TEST(Advisor, ParameterServersMoreThanTenPercentApartAreFlagged) {
  RunProfile r = run_waiting(0.0);
  r.server_busy_seconds = {1.00, 1.05, 0.97};  // spread 8% of the mean
  EXPECT_EQ(find(advise(r), "server_imbalance"), nullptr);
  r.server_busy_seconds = {1.00, 1.20, 0.97};
  const auto findings = advise(r);
  const Finding* f = find(findings, "server_imbalance");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->key, "parallel.ps.part_mb");
  EXPECT_NE(
      f->evidence.find("parameter server 1 was busy (CPU) for 1200.0 ms, server 2 for 970.0 ms"),
      std::string::npos)
      << f->evidence;
}

// Near the memory cap: recompute and ZeRO-1 each say what they would save, and neither is
// suggested once on; far from it, nothing is said.
TEST(Advisor, NearTheMemoryCapRecomputeAndShardedStateSayWhatTheySave) {
  constexpr double kMiB = 1 << 20;
  RunProfile r = run_waiting(0.0);
  r.memory_cap_bytes = 1000 * kMiB;
  r.peak_tensor_bytes = 900 * kMiB;
  r.parameter_bytes = 100 * kMiB;     // and as much again of gradients
  r.optimizer_state_bytes = 200 * kMiB;  // AdamW: two moments
  r.data_parallel_ranks = 2;
  auto findings = advise(r);
  const Finding* recompute = find(findings, "memory_recompute");
  ASSERT_NE(recompute, nullptr);
  EXPECT_EQ(recompute->key, "train.activation_checkpointing");
  EXPECT_NE(recompute->evidence.find("90%"), std::string::npos) << recompute->evidence;
  // 900 - 2 x 100 - 200 = 500 MB of activations, three quarters of them saved.
  EXPECT_NE(recompute->advice.find("375 MB of the 500 MB"), std::string::npos)
      << recompute->advice;
  const Finding* zero = find(findings, "memory_zero");
  ASSERT_NE(zero, nullptr);
  EXPECT_EQ(zero->key, "parallel.zero");
  EXPECT_NE(zero->advice.find("about 100 MB less"), std::string::npos) << zero->advice;
  EXPECT_NE(zero->advice.find("parallel.zero: 2 also the 100 MB of gradients: about 50 MB more"),
            std::string::npos)
      << zero->advice;

  r.zero_stage = 1;  // ZeRO-2 is what is left
  findings = advise(r);
  zero = find(findings, "memory_zero");
  ASSERT_NE(zero, nullptr);
  EXPECT_NE(zero->advice.find("parallel.zero: 2 also shards the 100 MB of gradients: about 50 MB "
                              "less"),
            std::string::npos)
      << zero->advice;

  r.accumulates_gradients = true;  // a pipeline or grad_accum: ZeRO-2 saves nothing more
  findings = advise(r);
  EXPECT_EQ(find(findings, "memory_zero"), nullptr);
  r.zero_stage = 0;
  zero = find(advise(r), "memory_zero");
  ASSERT_NE(zero, nullptr);
  EXPECT_EQ(zero->advice.find("parallel.zero: 2"), std::string::npos) << zero->advice;
  r.accumulates_gradients = false;

  r.recompute = true;
  r.zero_stage = 2;
  findings = advise(r);
  EXPECT_EQ(find(findings, "memory_recompute"), nullptr);
  EXPECT_EQ(find(findings, "memory_zero"), nullptr);

  r = run_waiting(0.0);
  r.memory_cap_bytes = 1000 * kMiB;
  r.peak_tensor_bytes = 500 * kMiB;
  r.data_parallel_ranks = 2;
  r.optimizer_state_bytes = 200 * kMiB;
  EXPECT_EQ(find(advise(r), "memory_zero"), nullptr);
}

}  // namespace
}  // namespace loom::profile
