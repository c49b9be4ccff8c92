#include "loom/profile/advisor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "loom/core/blas_library.h"
#include "unit/profile/advisor_runs.h"

namespace loom::profile {
namespace {

// A LibTorch built against the system's BLAS (not the pip wheel, whose MKL is inside
// libtorch_cpu) computes fp32 products on whatever libblas.so.3 is: on netlib's reference BLAS
// the advisor names it and the fast one to install; on MKL or OpenBLAS there is nothing to say.
TEST(Advisor, TheReferenceBlasIsNamedWithThePackageThatReplacesIt) {
  RunProfile r = run_waiting(0.0);
  r.precision = "fp32";
  r.blas = "reference";
  r.blas_path = "/usr/lib/x86_64-linux-gnu/blas/libblas.so.3.11.0";
  r.fp32_matmul_flops_per_second = 2e9;
  const auto findings = advise(r);
  const Finding* f = find(findings, "reference_blas");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->severity, "high");
  EXPECT_EQ(f->key, "runtime.precision");
  EXPECT_NE(f->advice.find(kFastBlasPackage), std::string::npos) << f->advice;
  r.blas = "mkl";
  EXPECT_EQ(find(advise(r), "reference_blas"), nullptr);
  r.blas = "reference";
  r.precision = "bf16";  // products in bf16 go through oneDNN, not the BLAS
  EXPECT_EQ(find(advise(r), "reference_blas"), nullptr);
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
  // The evidence's words, once; everywhere else the numbers behind them.
  EXPECT_EQ(f->evidence, "data_wait is 50% of the step (5.0 ms of 10.0 ms)");
  EXPECT_DOUBLE_EQ(f->measured.at("share"), 0.5);
  EXPECT_DOUBLE_EQ(f->measured.at("phase_seconds"), 0.005);
  EXPECT_DOUBLE_EQ(f->measured.at("step_seconds"), 0.010);
  EXPECT_EQ(f->measured.at("loader_threads"), 1);
  EXPECT_EQ(f->measured.at("rank_cores"), 2);
  EXPECT_EQ(f->measured.count("compute_threads"), 0u);
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
  EXPECT_EQ(after->measured.at("compute_threads"), 2);  // the split the autotuner chose
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
  EXPECT_DOUBLE_EQ(f->measured.at("consumed_samples_per_second"), 200);
  EXPECT_DOUBLE_EQ(f->measured.at("worker_samples_per_second"), 100);  // 2 cores / 0.02 s
  EXPECT_EQ(f->measured.at("workers_needed"), 2);
  // With workers in the run, their measured rate decides: ceil(200 / 80) = 3.
  r.remote_workers = 1;
  r.remote_worker_samples_per_second = 80;
  const auto measured = advise(r);
  f = find(measured, "input_bound");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->key, "data.remote.workers");
  EXPECT_EQ(f->suggested, "3");
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
  EXPECT_EQ(find(findings, "precision")->suggested, "bf16");
  EXPECT_EQ(find(findings, "memory_format")->key, "runtime.memory_format");
  EXPECT_EQ(find(findings, "memory_format")->suggested, "channels_last");
  EXPECT_EQ(find(findings, "threads")->key, "runtime.threads");
  EXPECT_EQ(find(findings, "memory")->severity, "high");
  EXPECT_EQ(find(findings, "low_utilisation")->key, "data.batch_size");
  EXPECT_EQ(find(findings, "low_utilisation")->suggested, "");  // raise it, by no set amount
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
  EXPECT_EQ(general->measured.at("microbatches"), 4);
  EXPECT_EQ(general->measured.count("predicted_share"), 0u);
  EXPECT_EQ(general->suggested, "");  // no count simulated: more, but not how many

  r.better_microbatches = 16;
  r.better_bubble = 0.12;
  const auto findings = advise(r);
  const Finding* f = find(findings, "pipeline_bubble");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->evidence, "bubble is 31% of the step (3.1 ms of 10.0 ms)");
  EXPECT_EQ(f->key, "parallel.pipeline.microbatches");
  EXPECT_EQ(f->suggested, "16");
  EXPECT_DOUBLE_EQ(f->measured.at("predicted_share"), 0.12);
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
  EXPECT_EQ(f->measured.at("rank"), 2);
  EXPECT_DOUBLE_EQ(f->measured.at("compute_seconds"), 13.0);
  EXPECT_DOUBLE_EQ(f->measured.at("median_compute_seconds"), 10.0);  // nearest-rank, the lower
  EXPECT_NEAR(f->measured.at("slower"), 0.3, 1e-12);
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
  EXPECT_EQ(f->measured.at("busiest_server"), 1);
  EXPECT_DOUBLE_EQ(f->measured.at("busiest_seconds"), 1.20);
  EXPECT_EQ(f->measured.at("idlest_server"), 2);
  EXPECT_DOUBLE_EQ(f->measured.at("idlest_seconds"), 0.97);
}

// Compute threads are weighed against this rank's share of the host: two ranks of one thread on
// two cores use them all; one rank of one thread on two cores leaves one idle.
TEST(Advisor, ThreadsCountTheRanksSharingTheHost) {
  RunProfile r = run_waiting(0);
  r.loader_decodes = false;
  r.usable_cores = 2;
  r.compute_threads = 1;
  r.ranks_on_host = 2;
  EXPECT_EQ(find(advise(r), "threads"), nullptr);

  r.ranks_on_host = 1;
  auto findings = advise(r);
  const Finding* f = find(findings, "threads");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->key, "runtime.threads");
  EXPECT_EQ(f->evidence, "compute uses 1 of 2 usable cores");
  EXPECT_EQ(f->suggested, "auto");

  r.usable_cores = 4;  // two ranks on four cores: each has two
  r.ranks_on_host = 2;
  findings = advise(r);
  f = find(findings, "threads");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->evidence, "compute uses 1 of 2 cores (the host's 4 usable cores over its 2 ranks)");
  EXPECT_EQ(f->advice, "set runtime.threads to auto (this rank's share of the usable cores)");
  r.compute_threads = 2;
  EXPECT_EQ(find(advise(r), "threads"), nullptr);
}

// A script sets threads with loom.runtime.configure and micro-batches with Pipeline's argument:
// its advice says so, and `key` stays the configuration key.
TEST(Advisor, AScriptIsToldThePythonCall) {
  RunProfile r = run_waiting(0);
  r.python = true;
  r.loader_decodes = false;
  r.compute_threads = 1;
  auto findings = advise(r);
  const Finding* f = find(findings, "threads");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->key, "runtime.threads");
  EXPECT_EQ(f->advice,
            "call loom.runtime.configure(threads=2) (or threads=\"auto\": the usable cores)");

  // Two ranks on four cores: "auto" would give each all four, so the count is named.
  r.usable_cores = 4;
  r.ranks_on_host = 2;
  findings = advise(r);
  f = find(findings, "threads");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->advice,
            "call loom.runtime.configure(threads=2) on every rank (threads=\"auto\" would give "
            "each all 4 of the host's cores)");

  RunProfile piped = run_waiting(0);
  piped.python = true;
  piped.step_times.seconds[static_cast<size_t>(Phase::kForward)] = 0.69;
  piped.step_times.seconds[static_cast<size_t>(Phase::kBubble)] = 0.31;
  piped.better_microbatches = 16;
  piped.better_bubble = 0.12;
  findings = advise(piped);
  f = find(findings, "pipeline_bubble");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->advice, "raise loom.pipeline.Pipeline's microbatches to 16 (predicted bubble 12%)");
  EXPECT_EQ(f->key, "parallel.pipeline.microbatches");

  RunProfile waiting = run_waiting(0.5);
  waiting.python = true;
  waiting.precision = "fp32";
  findings = advise(waiting);
  f = find(findings, "input_bound");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->advice,
            "give the loader more threads: data.workers (in the loom.data.Loader's "
            "configuration) is 1 of 2 usable cores");
  EXPECT_EQ(f->key, "data.workers");
  f = find(findings, "precision");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->advice,
            "compute under torch.autocast(\"cpu\", dtype=torch.bfloat16) (it keeps fp32 weights)");
  EXPECT_EQ(f->key, "runtime.precision");
}

// 100 steady steps: 11 of `fast` seconds, 78 of `median`, 11 of `slow` (nearest-rank p10, median
// and p90 are exactly those), interleaved as a run would have them; the slow steps wait
// `slow_wait` for data.
RunProfile run_with_steps(double fast, double median, double slow, double slow_wait = 0) {
  RunProfile r = run_waiting(0);
  for (int i = 0; i < 100; ++i) {
    const double wall = i % 9 == 0 && i < 99 ? fast : i % 9 == 4 && i < 99 ? slow : median;
    r.step_seconds.push_back(wall);
    r.step_data_wait_seconds.push_back(wall == slow ? slow_wait : 0.0);
  }
  r.steps = 100;
  r.step_times.wall = 0;
  for (double s : r.step_seconds) r.step_times.wall += s;
  r.step_times.seconds[static_cast<size_t>(Phase::kForward)] = r.step_times.wall;
  return r;
}

TEST(Advisor, UnsteadyThroughputGivesTheSpreadAndTheLikelyCause) {
  // The report that asked for it: throughput swinging 8x on a host others used.
  RunProfile r = run_with_steps(0.010, 0.020, 0.080);
  ASSERT_EQ(std::count(r.step_seconds.begin(), r.step_seconds.end(), 0.010), 11);
  ASSERT_EQ(std::count(r.step_seconds.begin(), r.step_seconds.end(), 0.080), 11);
  r.samples_per_second = 64 / (r.step_times.wall / 100);  // 64 samples a step
  r.other_cores = 1.0;                                    // another process kept a core busy
  r.cpu_utilisation = 0.5;
  auto findings = advise(r);
  const Finding* f = find(findings, "unsteady_throughput");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->severity, "high");
  EXPECT_EQ(f->evidence,
            "over 100 steady steps the step took 10.0 ms at p10, 20.0 ms at the median and 80.0 "
            "ms at p90 (8.0x; fastest 10.0 ms, slowest 80.0 ms): 800 samples/s at p90 against "
            "6400 samples/s at p10 (2510 samples/s overall)");
  EXPECT_DOUBLE_EQ(f->measured.at("p10_seconds"), 0.010);
  EXPECT_DOUBLE_EQ(f->measured.at("median_seconds"), 0.020);
  EXPECT_DOUBLE_EQ(f->measured.at("p90_seconds"), 0.080);
  EXPECT_DOUBLE_EQ(f->measured.at("other_cores"), 1.0);  // the likely cause: a shared host
  EXPECT_EQ(f->key, "");
  // Every step as fast as the fastest tenth: the mean step (25.5 ms) over 10 ms.
  EXPECT_NEAR(f->max_gain, 2.55, 1e-9);

  // The job's other rank on the host used what this one did: nobody else is there.
  r.usable_cores = 4;
  r.ranks_on_host = 2;  // this rank's 2 cores, half of them used: 1 core, as the other's
  findings = advise(r);
  f = find(findings, "unsteady_throughput");
  ASSERT_NE(f, nullptr);
  EXPECT_DOUBLE_EQ(f->measured.at("other_cores"), 0.0);
  EXPECT_EQ(f->key, "");

  // The slow steps spent their extra time waiting for data: the input.
  RunProfile input = run_with_steps(0.010, 0.020, 0.080, 0.070);
  input.other_cores = 0.0;
  findings = advise(input);
  f = find(findings, "unsteady_throughput");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->key, "data.workers");  // the likely cause: the input
  EXPECT_DOUBLE_EQ(f->measured.at("slow_wait_seconds"), 0.070);
  EXPECT_DOUBLE_EQ(f->measured.at("fast_wait_seconds"), 0.0);

  // Not measured: the advice says so and what to check.
  RunProfile unknown = run_with_steps(0.010, 0.012, 0.020);
  findings = advise(unknown);
  f = find(findings, "unsteady_throughput");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->severity, "moderate");               // 2x
  EXPECT_EQ(f->measured.count("other_cores"), 0u);  // not measured: the advice says what to check
  EXPECT_EQ(f->key, "");
}

TEST(Advisor, SteadyStepsAreNotUnsteady) {
  EXPECT_EQ(find(advise(run_with_steps(0.019, 0.020, 0.023)), "unsteady_throughput"), nullptr);
  // 1.4x: past noise but under the threshold.
  EXPECT_EQ(find(advise(run_with_steps(0.010, 0.012, 0.014)), "unsteady_throughput"), nullptr);
  // Too few steps to have tenths.
  RunProfile few = run_with_steps(0.010, 0.020, 0.080);
  few.step_seconds.resize(19);
  few.step_data_wait_seconds.resize(19);
  EXPECT_EQ(find(advise(few), "unsteady_throughput"), nullptr);
}

// A series of evaluations, one an epoch of 100 steps: (train loss, validation loss) each.
std::vector<Evaluation> evaluations(const std::vector<std::pair<double, double>>& losses) {
  std::vector<Evaluation> out;
  for (size_t i = 0; i < losses.size(); ++i) {
    out.push_back({static_cast<int64_t>(100 * (i + 1)), losses[i].first, losses[i].second});
  }
  return out;
}

// The validation loss rising at each of the last 3 evaluations while the train loss falls is
// overfitting, pointing at the best evaluation's step and checkpoint.keep_best.
TEST(Advisor, OverfittingNamesTheBestStepAndKeepBest) {
  RunProfile r = run_waiting(0);
  r.evaluations =
      evaluations({{3.0, 5.4}, {2.4, 5.2}, {2.0, 5.15}, {1.7, 5.16}, {1.5, 5.2}, {1.3, 5.29}});
  std::vector<Finding> findings = advise(r);
  const Finding* f = find(findings, "overfitting");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->key, "checkpoint.keep_best");
  EXPECT_EQ(f->step, 300);             // the lowest validation loss, 5.15
  EXPECT_EQ(f->severity, "moderate");  // 5.29 is 2.7% above it
  EXPECT_EQ(f->max_gain, 0);
  EXPECT_EQ(f->suggested, "test_loss");  // no checkpoint kept by the loss yet
  EXPECT_DOUBLE_EQ(f->measured.at("best_loss"), 5.15);
  EXPECT_DOUBLE_EQ(f->measured.at("last_loss"), 5.29);

  // Far above its best: high. The kept checkpoint is named when it is the best step's.
  r.evaluations.push_back({700, 1.2, 5.6});
  r.best_checkpoint = "runs/x/checkpoints/step-00000300";
  r.best_checkpoint_step = 300;
  findings = advise(r);
  f = find(findings, "overfitting");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->severity, "high");
  EXPECT_EQ(f->step, 300);
  EXPECT_EQ(f->suggested, "");  // it already keeps the best: use it
  EXPECT_NE(f->advice.find(r.best_checkpoint), std::string::npos) << f->advice;
}

// A resumed run saw only its own evaluations: checkpoint.keep_best's record from before the
// resume knows the best, when it ranks by the loss (or perplexity, its exponential).
TEST(Advisor, OverfittingAfterAResumeCountsTheKeptBestFromBefore) {
  RunProfile r = run_waiting(0);
  r.evaluations = evaluations({{1.3, 5.2}, {1.2, 5.25}, {1.1, 5.3}, {1.0, 5.4}});  // steps 100-400
  for (Evaluation& e : r.evaluations) e.step += 1000;
  r.best_checkpoint = "runs/x/checkpoints/step-00000600";
  r.best_checkpoint_step = 600;
  r.best_checkpoint_metric = "test_perplexity";
  r.best_checkpoint_value = std::exp(5.0);
  std::vector<Finding> findings = advise(r);
  const Finding* f = find(findings, "overfitting");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->step, 600);
  EXPECT_EQ(f->severity, "high");  // 5.4 is 8% above 5.0
  EXPECT_NE(f->advice.find(r.best_checkpoint), std::string::npos) << f->advice;

  // Kept by accuracy, which does not rank losses: the best loss is this process's own.
  r.best_checkpoint_metric = "test_accuracy";
  r.best_checkpoint_value = 0.4;
  findings = advise(r);
  f = find(findings, "overfitting");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->step, 1100);
  EXPECT_EQ(f->key, "checkpoint.keep_best");
  EXPECT_EQ(f->suggested, "test_loss");
}

TEST(Advisor, NoOverfittingWithoutThreeRisesWhileTheTrainLossFalls) {
  RunProfile r = run_waiting(0);
  // Two rises only.
  r.evaluations = evaluations({{3.0, 5.4}, {2.4, 5.2}, {2.0, 5.25}, {1.7, 5.3}});
  EXPECT_EQ(find(advise(r), "overfitting"), nullptr);
  // A dip inside the last three.
  r.evaluations = evaluations({{3.0, 5.4}, {2.4, 5.2}, {2.0, 5.3}, {1.7, 5.25}, {1.5, 5.3}});
  EXPECT_EQ(find(advise(r), "overfitting"), nullptr);
  // Both losses rising: the run is diverging, not overfitting.
  r.evaluations = evaluations({{1.0, 5.0}, {1.1, 5.1}, {1.2, 5.2}, {1.3, 5.3}});
  EXPECT_EQ(find(advise(r), "overfitting"), nullptr);
  // The same rise with the train loss falling is.
  r.evaluations = evaluations({{1.3, 5.0}, {1.2, 5.1}, {1.1, 5.2}, {1.0, 5.3}});
  const std::vector<Finding> findings = advise(r);
  ASSERT_NE(find(findings, "overfitting"), nullptr);
  EXPECT_EQ(find(findings, "overfitting")->step, 100);
  // Other findings point at no step.
  EXPECT_EQ(find(advise(run_waiting(0.5)), "input_bound")->step, -1);
}

}  // namespace
}  // namespace loom::profile
