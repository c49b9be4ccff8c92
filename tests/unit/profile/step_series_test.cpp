#include "loom/profile/step_series.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

namespace loom::profile {
namespace {

TEST(StepSeries, KeepsEveryStepUpToItsCapacity) {
  StepSeries series(4);
  series.add(0.010, 0.001);
  series.add(0.020, 0.002);
  EXPECT_EQ(series.steps(), 2);
  EXPECT_EQ(series.wall_seconds(), (std::vector<double>{0.010, 0.020}));
  EXPECT_EQ(series.data_wait_seconds(), (std::vector<double>{0.001, 0.002}));
}

// Past its capacity it keeps a uniform sample: a long run's mean survives, and so does a
// pattern that repeats every other step (which keeping every k-th step would alias away).
TEST(StepSeries, PastItsCapacityKeepsAUniformSample) {
  StepSeries series(1000);
  for (int i = 0; i < 100000; ++i) series.add(i % 2 == 0 ? 0.010 : 0.030, i % 2 == 0 ? 0 : 0.02);
  EXPECT_EQ(series.steps(), 100000);
  ASSERT_EQ(series.wall_seconds().size(), 1000u);
  const auto& wall = series.wall_seconds();
  const auto slow = std::count(wall.begin(), wall.end(), 0.030);
  EXPECT_NEAR(static_cast<double>(slow) / 1000, 0.5, 0.06);
  // The two lists stay paired: each slow step has its wait.
  for (size_t i = 0; i < wall.size(); ++i) {
    EXPECT_EQ(series.data_wait_seconds()[i], wall[i] == 0.030 ? 0.02 : 0.0);
  }

  StepSeries ramp(1000);
  for (int i = 0; i < 100000; ++i) ramp.add(i, 0);
  const double mean =
      std::accumulate(ramp.wall_seconds().begin(), ramp.wall_seconds().end(), 0.0) / 1000;
  EXPECT_NEAR(mean, 50000, 3000);  // the standard error of 1000 draws is about 900
}

}  // namespace
}  // namespace loom::profile
