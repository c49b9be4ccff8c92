#include "loom/train/schedule.h"

#include <gtest/gtest.h>

#include <cmath>

namespace loom::train {
namespace {

TEST(Schedule, LinearWarmupThenConstant) {
  ScheduleConfig s;
  s.name = "constant";
  s.warmup_steps = 4;
  EXPECT_DOUBLE_EQ(learning_rate(s, 0.8, 0, 100), 0.2);
  EXPECT_DOUBLE_EQ(learning_rate(s, 0.8, 3, 100), 0.8);
  EXPECT_DOUBLE_EQ(learning_rate(s, 0.8, 50, 100), 0.8);
}

TEST(Schedule, StepDecay) {
  ScheduleConfig s;
  s.name = "step";
  s.warmup_steps = 0;
  s.step_size = 10;
  s.gamma = 0.5;
  EXPECT_DOUBLE_EQ(learning_rate(s, 1.0, 9, 100), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate(s, 1.0, 10, 100), 0.5);
  EXPECT_DOUBLE_EQ(learning_rate(s, 1.0, 25, 100), 0.25);
}

TEST(Schedule, CosineFromPeakToFloor) {
  ScheduleConfig s;
  s.name = "cosine";
  s.warmup_steps = 10;
  s.min_lr = 0.1;
  EXPECT_DOUBLE_EQ(learning_rate(s, 1.0, 10, 110), 1.0);
  EXPECT_NEAR(learning_rate(s, 1.0, 60, 110), 0.55, 1e-12);  // halfway: mean of peak and floor
  EXPECT_NEAR(learning_rate(s, 1.0, 110, 110), 0.1, 1e-12);
  EXPECT_NEAR(learning_rate(s, 1.0, 35, 110), 0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * 0.25)), 1e-12);
}

}  // namespace
}  // namespace loom::train
