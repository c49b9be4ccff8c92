// A training step's phases on the device's own clock. On a GPU the host only queues the work: the
// host's clock charges a phase with how long its launches took, and the time the GPU spends on
// them lands wherever the host next waits (the loss read, a copy, the optimizer). Here a mark is
// recorded in the device's queue (an event on its current stream) at each phase boundary, and the
// device time between two marks is charged to the phase they bound: the device time of the work
// queued in that phase, or the time the device sat idle waiting for the host to queue more (a
// device starved by its input shows it as data_wait).
//
// The marks are read late, once the device has passed them, so the timer never makes the host
// wait in a step; the run's last steps are read at its end (read(true)). Traced steps (the
// profile.trace window) also give their phases as spans from an origin mark, which the caller
// places on the host's time axis (the Chrome trace's track of the device).
//
// Threading: one timer per training loop.
#pragma once

#include <c10/core/Device.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "loom/profile/step_timer.h"

namespace loom::profile {

// Points in a device's queue whose times can be read once the device has passed them.
class StepMarks {
 public:
  virtual ~StepMarks() = default;
  // A mark at this point of the device's queue; returns its handle.
  virtual size_t record() = 0;
  // Whether the device has passed `mark`, without waiting for it.
  virtual bool reached(size_t mark) = 0;
  virtual void wait(size_t mark) = 0;
  // Device seconds from mark `from` to mark `to` (both reached).
  virtual double seconds(size_t from, size_t to) = 0;
  // `mark` is read: its handle may be given out again.
  virtual void release(size_t mark) = 0;
};

// Timing events on `device`'s current stream (c10::Event: CUDA's where the device is a GPU).
std::unique_ptr<StepMarks> device_event_marks(c10::Device device);

class DeviceStepTimer {
 public:
  explicit DeviceStepTimer(std::unique_ptr<StepMarks> marks) : marks_(std::move(marks)) {}

  void begin_step();  // in kOther until the first enter()
  void enter(Phase phase);
  // `steady`: the step counts in the steady-state sums once read. `traced_step` (>= 0): its
  // spans go to the trace sink once read, under that number.
  void end_step(bool steady, int64_t traced_step = -1);

  // A traced step's phase on the device's clock, in seconds from the origin.
  struct Span {
    Phase phase;
    double begin, end;
  };
  // Receives a traced step once read: its number, its begin and end, and its phases' spans in
  // order (a span the device passed in no time is left out).
  using TraceSink =
      std::function<void(int64_t step, double begin, double end, const std::vector<Span>& spans)>;
  // Records the origin here and waits for the device to pass it, so that the host's clock read
  // just after is the origin's time (one wait, between steps; the device's queue is drained of
  // what came before). Traced steps go to `sink` from now on.
  void trace_from_here(TraceSink sink);
  // Reads the ended steps the device has passed, oldest first; with `wait`, all of them.
  void read(bool wait);

  // The steady steps read so far, summed; `wall` is their device time from first mark to last.
  const StepTimes& steady() const { return steady_; }
  // Every step read since the last call (steady or not), summed, and how many; then none.
  struct Window {
    StepTimes times;
    int64_t steps = 0;
  };
  Window take_window();
  int64_t steady_steps() const { return steady_steps_; }
  // Steps ended but not read yet.
  size_t unread_steps() const { return ended_.size(); }

 private:
  struct Step {
    std::vector<std::pair<Phase, size_t>> marks;  // the phase entered at each mark, in order
    bool steady = false;
    int64_t traced_step = -1;
  };
  void charge(const Step& step);
  void trace(const Step& step);

  std::unique_ptr<StepMarks> marks_;
  Step current_;  // its last mark's phase is the one it is in
  std::deque<Step> ended_;
  StepTimes steady_;
  int64_t steady_steps_ = 0;
  Window window_;
  TraceSink trace_sink_;
  size_t origin_ = 0;  // the traced spans' origin mark, kept while tracing
};

}  // namespace loom::profile
