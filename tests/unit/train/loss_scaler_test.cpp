#include "loom/train/loss_scaler.h"

#include <gtest/gtest.h>

#include "loom/core/error.h"

namespace loom::train {
namespace {

// As torch.amp.GradScaler: an overflow skips the step and halves the scale; growth_interval
// steps in a row without one double it; the run's skipped steps are counted.
TEST(LossScaler, BacksOffOnOverflowAndGrowsAfterTheInterval) {
  LossScalerOptions options;
  options.growth_interval = 3;
  LossScaler scaler(options);
  EXPECT_EQ(scaler.scale(), 65536.0);
  EXPECT_TRUE(scaler.update(true, 1));
  EXPECT_TRUE(scaler.update(true, 2));
  EXPECT_EQ(scaler.state(), (LossScaleState{65536.0, 2, 0}));
  EXPECT_FALSE(scaler.update(false, 3));  // skipped: the tracker starts again
  EXPECT_EQ(scaler.state(), (LossScaleState{32768.0, 0, 1}));
  for (int64_t step = 4; step <= 6; ++step) EXPECT_TRUE(scaler.update(true, step));
  EXPECT_EQ(scaler.state(), (LossScaleState{65536.0, 0, 1}));
  EXPECT_FALSE(scaler.update(false, 7));
  EXPECT_FALSE(scaler.update(false, 8));
  EXPECT_EQ(scaler.state(), (LossScaleState{16384.0, 0, 3}));

  LossScaler resumed(options);
  resumed.restore(scaler.state());
  EXPECT_EQ(resumed.scale(), 16384.0);
  EXPECT_EQ(resumed.state(), scaler.state());
}

// Gradients that overflow even unscaled are not fp16's range: the run stops, naming the step.
TEST(LossScaler, OverflowAtAScaleOfOneStopsTheRun) {
  LossScaler scaler({}, LossScaleState{2.0, 0, 15});
  EXPECT_FALSE(scaler.update(false, 40));
  EXPECT_EQ(scaler.scale(), 1.0);
  try {
    scaler.update(false, 41);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.field("problem"), "non_finite_gradients");
    EXPECT_EQ(e.field("step"), "41");
  }
}

}  // namespace
}  // namespace loom::train
