#include "loom/profile/device_step_timer.h"

#include <c10/core/Event.h>
#include <c10/core/impl/VirtualGuardImpl.h>

namespace loom::profile {
namespace {

// c10's events, kept for reuse: a step records one at each phase boundary.
class EventMarks : public StepMarks {
 public:
  explicit EventMarks(c10::Device device) : device_(device), guard_(device.type()) {}

  size_t record() override {
    size_t mark;
    if (!free_.empty()) {
      mark = free_.back();
      free_.pop_back();
    } else {
      mark = events_.size();
      // BACKEND_DEFAULT: with timing (torch's default event has none).
      events_.emplace_back(device_.type(), c10::EventFlag::BACKEND_DEFAULT);
    }
    events_[mark].record(guard_.getStream(device_));
    return mark;
  }
  bool reached(size_t mark) override { return events_[mark].query(); }
  void wait(size_t mark) override { events_[mark].synchronize(); }
  double seconds(size_t from, size_t to) override {
    return events_[from].elapsedTime(events_[to]) / 1000.0;  // milliseconds
  }
  void release(size_t mark) override { free_.push_back(mark); }

 private:
  c10::Device device_;
  c10::impl::VirtualGuardImpl guard_;
  std::deque<c10::Event> events_;  // a deque: events do not move once made
  std::vector<size_t> free_;
};

}  // namespace

std::unique_ptr<StepMarks> device_event_marks(c10::Device device) {
  return std::make_unique<EventMarks>(device);
}

void DeviceStepTimer::begin_step() {
  for (const auto& [phase, mark] : current_.marks) marks_->release(mark);  // a step never ended
  current_ = {};
  current_.marks.emplace_back(Phase::kOther, marks_->record());
}

void DeviceStepTimer::enter(Phase phase) {
  // Outside a step, or the phase it is in already: no boundary.
  if (current_.marks.empty() || phase == current_.marks.back().first) return;
  current_.marks.emplace_back(phase, marks_->record());
}

void DeviceStepTimer::end_step(bool steady, int64_t traced_step) {
  if (current_.marks.empty()) return;
  current_.marks.emplace_back(Phase::kOther, marks_->record());  // the step's end
  current_.steady = steady;
  current_.traced_step = traced_step;
  ended_.push_back(std::move(current_));
  current_ = {};
}

void DeviceStepTimer::read(bool wait) {
  // The device passes marks in the order recorded: once it has passed the newest, it has passed
  // them all.
  if (wait && !ended_.empty()) marks_->wait(ended_.back().marks.back().second);
  while (!ended_.empty()) {
    const Step& step = ended_.front();
    if (!marks_->reached(step.marks.back().second)) return;
    charge(step);
    trace(step);
    for (const auto& [phase, mark] : step.marks) marks_->release(mark);
    ended_.pop_front();
  }
}

DeviceStepTimer::Window DeviceStepTimer::take_window() {
  Window taken = window_;
  window_ = {};
  return taken;
}

void DeviceStepTimer::charge(const Step& step) {
  StepTimes times;
  for (size_t i = 0; i + 1 < step.marks.size(); ++i) {
    const auto& [phase, mark] = step.marks[i];
    times.seconds[static_cast<size_t>(phase)] += marks_->seconds(mark, step.marks[i + 1].second);
  }
  times.wall = marks_->seconds(step.marks.front().second, step.marks.back().second);
  window_.times += times;
  ++window_.steps;
  if (!step.steady) return;
  steady_ += times;
  ++steady_steps_;
}

void DeviceStepTimer::trace_from_here(TraceSink sink) {
  if (trace_sink_) marks_->release(origin_);
  origin_ = marks_->record();
  marks_->wait(origin_);
  trace_sink_ = std::move(sink);
}

void DeviceStepTimer::trace(const Step& step) {
  if (step.traced_step < 0 || !trace_sink_) return;
  // Each mark's time: the step's start from the origin, then the mark from the step's start (the
  // events' float milliseconds keep microseconds inside a step however far it is from the origin).
  const size_t first = step.marks.front().second;
  const double start = marks_->seconds(origin_, first);
  std::vector<double> at;
  for (const auto& [phase, mark] : step.marks) at.push_back(start + marks_->seconds(first, mark));
  std::vector<Span> spans;
  for (size_t i = 0; i + 1 < at.size(); ++i) {
    if (at[i + 1] > at[i]) spans.push_back({step.marks[i].first, at[i], at[i + 1]});
  }
  trace_sink_(step.traced_step, at.front(), at.back(), spans);
}

}  // namespace loom::profile
