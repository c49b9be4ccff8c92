#include "loom/profile/autotuner.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>

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

std::vector<TuningDimension> threads_dimensions() {
  return {{"data.workers", {1, 2, 4}}, {"runtime.threads", {4, 3, 2, 1}}};
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
  Autotuner tuner(threads_dimensions(), {1, 4}, quick_options());
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
  // The start, 2 other loader counts, then 3 other compute counts (with 2 loader threads).
  ASSERT_EQ(r.trials.size(), 6u);
  EXPECT_EQ(r.trials[0].key, "");
  EXPECT_EQ(r.trials[1].settings, (std::vector<double>{2, 4}));
  EXPECT_EQ(r.trials[3].key, "runtime.threads");
  EXPECT_EQ(r.trials[3].settings, (std::vector<double>{2, 3}));
  EXPECT_DOUBLE_EQ(r.start_score, 1000 - 100 - 80);
  EXPECT_DOUBLE_EQ(r.chosen_score, 1000);
  // Warm-up 3 + 3 samples x 2 steps for the start; 1 + 6 for each of the 5 others.
  EXPECT_EQ(steps, 3 + 6 + 5 * 7);
  EXPECT_EQ(r.steps, steps);
}

TEST(Autotuner, NoiseBelowTheMinimumGainMovesNothing) {
  AutotuneOptions o = quick_options();
  o.min_gain = 0.03;
  Autotuner tuner(threads_dimensions(), {2, 2}, o);
  // Every setting is equally fast, give or take 1%.
  const Rate rate = [](const std::vector<double>&, int64_t step) {
    return 500.0 * (1 + 0.01 * std::sin(1.7 * static_cast<double>(step)));
  };
  run_job(tuner, rate);
  EXPECT_EQ(tuner.result().chosen, (std::vector<double>{2, 2}));
}

TEST(Autotuner, TheMedianIgnoresOneFastSample) {
  AutotuneOptions o = quick_options();
  o.sample_steps = 1;
  Autotuner tuner({{"data.prefetch_batches", {2, 8}}}, {2}, o);
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
  Autotuner tuner({{"data.workers", {1}}}, {1}, o);  // nothing to try but the start
  // 64 samples per step at 320/s: 0.2 s a step, so a sample needs 5 steps, not 2.
  const int64_t steps = run_job(tuner, [](const std::vector<double>&, int64_t) { return 320.0; });
  EXPECT_EQ(steps, 3 * 5);
  EXPECT_NEAR(tuner.result().seconds, 3.0, 1e-9);
  ASSERT_EQ(tuner.result().trials.size(), 1u);
  EXPECT_EQ(tuner.result().trials[0].sample_rates.size(), 3u);
}

TEST(Autotuner, StopsAtTheStepBudgetKeepingWhatItMeasured) {
  AutotuneOptions o = quick_options();
  o.max_steps = 3 + 6 + 7 + 3;  // the start, one candidate, and part of the next
  Autotuner tuner(threads_dimensions(), {1, 4}, o);
  const Rate rate = [](const std::vector<double>& s, int64_t) { return s[0] == 2 ? 900.0 : 600.0; };
  const int64_t steps = run_job(tuner, rate);
  EXPECT_EQ(steps, o.max_steps);
  const AutotuneResult& r = tuner.result();
  EXPECT_FALSE(r.complete);
  ASSERT_EQ(r.trials.size(), 2u);                    // the unfinished trial is dropped
  EXPECT_EQ(r.chosen, (std::vector<double>{2, 4}));  // measured 1.5x faster: adopted
  EXPECT_EQ(tuner.settings(), r.chosen);
  EXPECT_FALSE(tuner.record_step(64, 0.1));  // done: nothing changes any more
}

TEST(Autotuner, CandidatesFitTheCores) {
  EXPECT_EQ(loader_thread_candidates(1), (std::vector<double>{1}));
  EXPECT_EQ(loader_thread_candidates(2), (std::vector<double>{1, 2}));
  EXPECT_EQ(loader_thread_candidates(6), (std::vector<double>{1, 2, 4, 6}));
  EXPECT_EQ(loader_thread_candidates(16), (std::vector<double>{1, 2, 4, 8, 16}));
  EXPECT_EQ(compute_thread_candidates(1), (std::vector<double>{1}));
  EXPECT_EQ(compute_thread_candidates(2), (std::vector<double>{2, 1}));
  EXPECT_EQ(compute_thread_candidates(16), (std::vector<double>{16, 12, 8, 4}));
}

}  // namespace
}  // namespace loom::profile
