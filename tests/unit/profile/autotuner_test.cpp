#include "loom/profile/autotuner.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <set>

#include "loom/core/error.h"

namespace loom::profile {
namespace {

using Rate = std::function<double(const std::vector<double>& settings, int64_t step)>;

// Runs a job whose samples/s is `rate` until the autotuner is done (or `limit` steps); returns
// the steps run. Checks that record_step() reports exactly the changes of settings().
int64_t run_job(Autotuner& tuner, const Rate& rate, int64_t limit = 100000) {
  constexpr int64_t kBatch = 64;
  int64_t step = 0;
  while (!tuner.done() && step < limit) {
    const std::vector<double> before = tuner.settings();
    const bool changed = tuner.record_step(kBatch, kBatch / rate(before, step));
    EXPECT_EQ(changed, tuner.settings() != before) << "step " << step;
    ++step;
  }
  return step;
}

const std::vector<std::string> kThreadKeys = {"data.workers", "runtime.threads"};

std::vector<TuningDimension> threads_dimensions() {
  return {TuningDimension::one("data.workers", {1, 2, 4}),
          TuningDimension::one("runtime.threads", {4, 3, 2, 1})};
}

AutotuneOptions quick_options() {
  AutotuneOptions o;
  o.first_warmup_steps = 3;
  o.warmup_steps = 1;
  o.sample_steps = 2;
  o.sample_seconds = 0;
  o.samples = 3;
  return o;
}

TEST(Autotuner, FindsTheBestOfEachSettingInTurn) {
  Autotuner tuner(kThreadKeys, {1, 4}, threads_dimensions(), quick_options());
  // Fastest with 2 loader threads and 3 compute threads; each setting matters on its own.
  const Rate rate = [](const std::vector<double>& s, int64_t) {
    return 1000.0 - 100 * std::abs(s[0] - 2) - 80 * std::abs(s[1] - 3);
  };
  const int64_t steps = run_job(tuner, rate);
  ASSERT_TRUE(tuner.done());
  const AutotuneResult& r = tuner.result();
  EXPECT_TRUE(r.complete);
  EXPECT_EQ(r.chosen, (std::vector<double>{2, 3}));
  EXPECT_EQ(tuner.settings(), r.chosen);
  EXPECT_EQ(r.start, (std::vector<double>{1, 4}));
  // The start, 2 other loader counts, the start again (2 loader threads look faster), then 3
  // other compute counts with 2 loader threads, and those settings again.
  ASSERT_EQ(r.trials.size(), 8u);
  EXPECT_EQ(r.trials[0].key, "");
  EXPECT_EQ(r.trials[1].settings, (std::vector<double>{2, 4}));
  EXPECT_TRUE(r.trials[3].recheck);
  EXPECT_EQ(r.trials[3].settings, (std::vector<double>{1, 4}));
  EXPECT_EQ(r.trials[4].key, "runtime.threads");
  EXPECT_EQ(r.trials[4].settings, (std::vector<double>{2, 3}));
  EXPECT_TRUE(r.trials[7].recheck);
  EXPECT_EQ(r.trials[7].settings, (std::vector<double>{2, 4}));
  EXPECT_DOUBLE_EQ(r.start_score, 1000 - 100 - 80);
  EXPECT_DOUBLE_EQ(r.chosen_score, 1000);
  // Warm-up 3 + 3 samples x 2 steps for the start; 1 + 6 for each of the 7 others.
  EXPECT_EQ(steps, 3 + 6 + 7 * 7);
  EXPECT_EQ(r.steps, steps);
}

TEST(Autotuner, NoiseBelowTheMinimumGainMovesNothing) {
  AutotuneOptions o = quick_options();
  o.min_gain = 0.03;
  Autotuner tuner(kThreadKeys, {2, 2}, threads_dimensions(), o);
  // Every setting is equally fast, give or take 1%.
  const Rate rate = [](const std::vector<double>&, int64_t step) {
    return 500.0 * (1 + 0.01 * std::sin(1.7 * static_cast<double>(step)));
  };
  run_job(tuner, rate);
  EXPECT_EQ(tuner.result().chosen, (std::vector<double>{2, 2}));
}

// A machine that speeds up as it runs makes every later candidate look faster; measuring the
// current settings again after them shows it is the machine.
TEST(Autotuner, DriftIsNotMistakenForAGain) {
  Autotuner tuner(kThreadKeys, {2, 2}, threads_dimensions(), quick_options());
  const Rate rate = [](const std::vector<double>&, int64_t step) {
    return 500.0 * (1 + 0.01 * static_cast<double>(step));
  };
  run_job(tuner, rate);
  const AutotuneResult& r = tuner.result();
  EXPECT_EQ(r.chosen, (std::vector<double>{2, 2}));
  ASSERT_GE(r.trials.size(), 4u);
  EXPECT_TRUE(r.trials[3].recheck);  // the candidates looked faster than the first measurement
  EXPECT_GT(r.trials[2].score, r.start_score * 1.03);
}

TEST(Autotuner, TheMedianIgnoresOneFastSample) {
  AutotuneOptions o = quick_options();
  o.sample_steps = 1;
  Autotuner tuner({"data.prefetch_batches"}, {2},
                  {TuningDimension::one("data.prefetch_batches", {2, 8})}, o);
  // Depth 8 is slower, but one of its samples catches a burst 10x faster.
  int64_t seen_at_8 = 0;
  const Rate rate = [&](const std::vector<double>& s, int64_t) {
    if (s[0] != 8) return 400.0;
    return ++seen_at_8 == 3 ? 4000.0 : 300.0;
  };
  run_job(tuner, rate);
  EXPECT_EQ(tuner.result().chosen, (std::vector<double>{2}));
  EXPECT_DOUBLE_EQ(tuner.result().trials.back().score, 300.0);
}

TEST(Autotuner, SamplesLastLongEnough) {
  AutotuneOptions o = quick_options();
  o.first_warmup_steps = 0;
  o.sample_steps = 2;
  o.sample_seconds = 1.0;
  Autotuner tuner({"data.workers"}, {1}, {TuningDimension::one("data.workers", {1})},
                  o);  // only the start
  // 64 samples per step at 320/s: 0.2 s a step, so a sample needs 5 steps, not 2.
  const int64_t steps = run_job(tuner, [](const std::vector<double>&, int64_t) { return 320.0; });
  EXPECT_EQ(steps, 3 * 5);
  EXPECT_NEAR(tuner.result().seconds, 3.0, 1e-9);
  ASSERT_EQ(tuner.result().trials.size(), 1u);
  EXPECT_EQ(tuner.result().trials[0].sample_rates.size(), 3u);
}

TEST(Autotuner, StopsAtTheStepBudgetKeepingWhatItMeasured) {
  AutotuneOptions o = quick_options();
  // The start, two loader counts and the recheck, then part of the first compute count.
  o.max_steps = 3 + 6 + 3 * 7 + 3;
  Autotuner tuner(kThreadKeys, {1, 4}, threads_dimensions(), o);
  const Rate rate = [](const std::vector<double>& s, int64_t) {
    return s[0] == 2 ? (s[1] == 3 ? 2000.0 : 900.0) : 600.0;
  };
  const int64_t steps = run_job(tuner, rate);
  EXPECT_EQ(steps, o.max_steps);
  const AutotuneResult& r = tuner.result();
  EXPECT_FALSE(r.complete);
  ASSERT_EQ(r.trials.size(), 4u);  // the unfinished trial is dropped
  // 2 loader threads were confirmed faster; the compute threads were not finished: unchanged.
  EXPECT_EQ(r.chosen, (std::vector<double>{2, 4}));
  EXPECT_EQ(tuner.settings(), r.chosen);
  EXPECT_FALSE(tuner.record_step(64, 0.1));  // done: nothing changes any more
}

// Loader and compute threads share the cores: with 2 cores, {2 loader, 1 compute} can be the
// best while changing either alone from {1, 2} only oversubscribes or starves. Tuning the split
// as one dimension finds it; settings measured once are not run again.
TEST(Autotuner, SplittingTheCoresFindsWhatOneAtATimeMisses) {
  const Rate rate = [](const std::vector<double>& s, int64_t) {
    if (s == std::vector<double>{2, 1}) return 900.0;
    if (s == std::vector<double>{1, 2}) return 500.0;
    return 450.0;
  };
  std::vector<TuningDimension> one_at_a_time = {TuningDimension::one("data.workers", {1, 2}),
                                                TuningDimension::one("runtime.threads", {2, 1})};
  Autotuner alone(kThreadKeys, {1, 2}, one_at_a_time, quick_options());
  run_job(alone, rate);
  EXPECT_EQ(alone.result().chosen, (std::vector<double>{1, 2}));

  TuningDimension split{kThreadKeys, thread_split_candidates(2)};
  EXPECT_EQ(split.name(), "data.workers+runtime.threads");
  one_at_a_time.insert(one_at_a_time.begin(), split);
  Autotuner joint(kThreadKeys, {1, 2}, one_at_a_time, quick_options());
  run_job(joint, rate);
  const AutotuneResult& r = joint.result();
  EXPECT_EQ(r.chosen, (std::vector<double>{2, 1}));
  EXPECT_EQ(r.trials[1].key, "data.workers+runtime.threads");
  std::set<std::vector<double>> tried;
  for (const auto& t : r.trials) {
    if (!t.recheck) EXPECT_TRUE(tried.insert(t.settings).second) << "ran twice";
  }
  // The start, {2, 1}, the start again, then {1, 1} and {2, 2}.
  EXPECT_EQ(tried.size(), 4u);
  EXPECT_THROW(
      Autotuner(kThreadKeys, {1, 2}, {TuningDimension::one("data.prefetch", {2})}, quick_options()),
      Error);
}

TEST(Autotuner, CandidatesFitTheCores) {
  EXPECT_EQ(loader_thread_candidates(1), (std::vector<double>{1}));
  EXPECT_EQ(loader_thread_candidates(2), (std::vector<double>{1, 2}));
  EXPECT_EQ(loader_thread_candidates(6), (std::vector<double>{1, 2, 4, 6}));
  EXPECT_EQ(loader_thread_candidates(16), (std::vector<double>{1, 2, 4, 8, 16}));
  EXPECT_EQ(compute_thread_candidates(1), (std::vector<double>{1}));
  EXPECT_EQ(compute_thread_candidates(2), (std::vector<double>{2, 1}));
  EXPECT_EQ(compute_thread_candidates(16), (std::vector<double>{16, 12, 8, 4}));
  using Splits = std::vector<std::vector<double>>;
  EXPECT_EQ(thread_split_candidates(1), (Splits{{1, 1}}));
  EXPECT_EQ(thread_split_candidates(2), (Splits{{1, 2}, {2, 1}}));
  EXPECT_EQ(thread_split_candidates(16), (Splits{{1, 16}, {5, 12}, {9, 8}, {13, 4}}));
}

}  // namespace
}  // namespace loom::profile
