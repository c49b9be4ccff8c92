#include "loom/profile/step_timer.h"

#include <gtest/gtest.h>

#include <thread>

namespace loom::profile {
namespace {

void busy(std::chrono::milliseconds d) { std::this_thread::sleep_for(d); }

// Each stretch of time goes to the phase that was current; the phases add up to the wall time.
TEST(StepTimer, ChargesEachInstantToOnePhase) {
  using std::chrono::milliseconds;
  StepTimer timer;
  timer.begin_step();
  busy(milliseconds(5));  // before any phase: other
  timer.enter(Phase::kDataWait);
  busy(milliseconds(20));
  timer.enter(Phase::kForward);
  busy(milliseconds(10));
  timer.enter(Phase::kDataWait);  // a phase can be entered again (gradient accumulation)
  busy(milliseconds(5));
  const StepTimes t = timer.end_step();
  // Sleeps last at least as long as asked; the upper bounds are loose for a loaded machine.
  EXPECT_GE(t[Phase::kDataWait], 0.025);
  EXPECT_GE(t[Phase::kForward], 0.010);
  EXPECT_GE(t[Phase::kOther], 0.005);
  EXPECT_EQ(t[Phase::kBackward], 0.0);
  double sum = 0;
  for (double s : t.seconds) sum += s;
  EXPECT_NEAR(sum, t.wall, 1e-9);
  EXPECT_GE(t.wall, 0.040);

  // The next step starts from nothing.
  timer.begin_step();
  const StepTimes next = timer.end_step();
  EXPECT_EQ(next[Phase::kDataWait], 0.0);
  EXPECT_EQ(next[Phase::kOther], next.wall);
  EXPECT_STREQ(phase_name(Phase::kCommExposed), "comm_exposed");
  EXPECT_STREQ(phase_name(Phase::kBubble), "bubble");
  EXPECT_STREQ(phase_name(Phase::kTensorComm), "tensor_comm");
}

}  // namespace
}  // namespace loom::profile
