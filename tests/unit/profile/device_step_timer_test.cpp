#include "loom/profile/device_step_timer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <vector>

namespace loom::profile {
namespace {

// A device of the test's own: a mark takes the clock's time when recorded, and the device passes
// marks only as far as the test lets it.
struct ScriptedMarks : StepMarks {
  struct State {
    double clock = 0;
    size_t passed = 0;  // marks 0 .. passed-1 are passed
    std::vector<double> times;
    std::vector<size_t> free;  // released handles, given out again as EventMarks does
    int waits = 0, released = 0;
  };
  explicit ScriptedMarks(State& s) : state(s) {}
  size_t record() override {
    if (!state.free.empty()) {  // a mark released before it was read would read a later time
      const size_t mark = state.free.back();
      state.free.pop_back();
      state.times[mark] = state.clock;
      state.passed = std::min(state.passed, mark);  // not passed again until the device gets there
      return mark;
    }
    state.times.push_back(state.clock);
    return state.times.size() - 1;
  }
  bool reached(size_t mark) override { return mark < state.passed; }
  void wait(size_t mark) override {
    ++state.waits;
    state.passed = std::max(state.passed, mark + 1);
  }
  double seconds(size_t from, size_t to) override { return state.times[to] - state.times[from]; }
  void release(size_t mark) override {
    ++state.released;
    state.free.push_back(mark);
  }
  State& state;
};

// Each span between two marks goes to the phase entered at the first; a phase entered again is no
// boundary; a step is read only once the device has passed its end, without waiting for it.
TEST(DeviceStepTimer, ChargesEachSpanToItsPhaseOnceTheDeviceHasPassedIt) {
  ScriptedMarks::State device;
  DeviceStepTimer timer(std::make_unique<ScriptedMarks>(device));
  timer.enter(Phase::kForward);  // outside a step: nothing
  EXPECT_TRUE(device.times.empty());
  timer.begin_step();  // at 0
  device.clock = 1;
  timer.enter(Phase::kForward);
  device.clock = 3;
  timer.enter(Phase::kBackward);
  device.clock = 4;
  timer.enter(Phase::kBackward);  // the same phase: no mark
  device.clock = 6;
  timer.enter(Phase::kOptimizer);
  device.clock = 7;
  timer.end_step(/*steady=*/true);
  EXPECT_EQ(device.times.size(), 5u);

  timer.read(false);  // the device is behind: nothing read, nothing waited for
  EXPECT_EQ(timer.steady_steps(), 0);
  EXPECT_EQ(timer.unread_steps(), 1u);
  EXPECT_EQ(device.waits, 0);
  device.passed = device.times.size();
  timer.read(false);
  EXPECT_EQ(timer.unread_steps(), 0u);
  ASSERT_EQ(timer.steady_steps(), 1);
  const StepTimes& t = timer.steady();
  EXPECT_EQ(t[Phase::kOther], 1);
  EXPECT_EQ(t[Phase::kForward], 2);
  EXPECT_EQ(t[Phase::kBackward], 3);
  EXPECT_EQ(t[Phase::kOptimizer], 1);
  EXPECT_EQ(t.wall, 7);
  EXPECT_EQ(device.released, 5);
  EXPECT_EQ(device.waits, 0);
}

// Steps out of the steady state are read and left out of the steady sums (a log line's window
// has every step read since the last); the run's end waits for the last ones. A step begun and
// never ended gives its marks back.
TEST(DeviceStepTimer, TheEndWaitsForTheStepsLeftAndOnlySteadyOnesCount) {
  ScriptedMarks::State device;
  DeviceStepTimer timer(std::make_unique<ScriptedMarks>(device));
  timer.begin_step();
  device.clock = 100;
  for (const bool steady : {false, true, true}) {
    timer.begin_step();
    device.clock += 1;
    timer.enter(Phase::kDataWait);
    device.clock += 2;
    timer.end_step(steady);
  }
  EXPECT_EQ(timer.unread_steps(), 3u);
  timer.read(true);
  EXPECT_EQ(device.waits, 1);  // the last step's end: the device passes marks in order
  EXPECT_EQ(timer.unread_steps(), 0u);
  EXPECT_EQ(timer.steady_steps(), 2);
  EXPECT_EQ(timer.steady()[Phase::kDataWait], 4);
  EXPECT_EQ(timer.steady().wall, 6);
  EXPECT_EQ(device.times.size(), 9u);  // the abandoned step's mark was given out again
  EXPECT_EQ(device.released, 10);
  const DeviceStepTimer::Window window = timer.take_window();
  EXPECT_EQ(window.steps, 3);
  EXPECT_EQ(window.times[Phase::kDataWait], 6);
  EXPECT_EQ(window.times[Phase::kOther], 3);
  EXPECT_EQ(window.times.wall, 9);
  EXPECT_EQ(timer.take_window().steps, 0);
}

// Traced steps give their phases as spans from the origin, which was waited for once; a span the
// device passed in no time is left out, and untraced steps are not given (but still charged).
TEST(DeviceStepTimer, TracedStepsGiveTheirPhasesAsSpansFromTheOrigin) {
  ScriptedMarks::State device;
  DeviceStepTimer timer(std::make_unique<ScriptedMarks>(device));
  struct Traced {
    int64_t step;
    double begin, end;
    std::vector<DeviceStepTimer::Span> spans;
  };
  std::vector<Traced> traced;
  device.clock = 10;
  timer.trace_from_here([&](int64_t step, double begin, double end, const auto& spans) {
    traced.push_back({step, begin, end, spans});
  });
  EXPECT_EQ(device.waits, 1);
  for (const int64_t step : {1, 2}) {
    device.clock += 5;
    timer.begin_step();
    device.clock += 1;
    timer.enter(Phase::kForward);
    device.clock += 2;
    timer.enter(Phase::kBackward);
    device.clock += 3;
    timer.enter(Phase::kOptimizer);  // and the step ends at once
    timer.end_step(/*steady=*/true, step == 2 ? step : -1);
  }
  device.passed = device.times.size();
  timer.read(false);
  EXPECT_EQ(timer.steady_steps(), 2);
  ASSERT_EQ(traced.size(), 1u);
  const Traced& t = traced[0];
  EXPECT_EQ(t.step, 2);
  EXPECT_EQ(t.begin, 16);  // step 2 began at 26, the origin was at 10
  EXPECT_EQ(t.end, 22);
  ASSERT_EQ(t.spans.size(), 3u);
  const Phase phases[] = {Phase::kOther, Phase::kForward, Phase::kBackward};
  const double begins[] = {16, 17, 19}, ends[] = {17, 19, 22};
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(t.spans[i].phase, phases[i]) << i;
    EXPECT_EQ(t.spans[i].begin, begins[i]) << i;
    EXPECT_EQ(t.spans[i].end, ends[i]) << i;
  }
  EXPECT_EQ(device.released, 10);  // the steps' marks; the origin stays while tracing
}

}  // namespace
}  // namespace loom::profile
