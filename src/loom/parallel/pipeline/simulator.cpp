#include "loom/parallel/pipeline/simulator.h"

#include <algorithm>
#include <map>
#include <tuple>

namespace loom::parallel::pipeline {
namespace {

using Kind = ActionKind;

// A message in flight, named by the receive that takes it: (receive kind, receiving stage,
// micro-batch).
using MessageKey = std::tuple<Kind, int, int>;

MessageKey message_of_send(const Action& send) {
  if (send.kind == Kind::kSendForward) return {Kind::kRecvForward, send.stage + 1, send.microbatch};
  return {Kind::kRecvBackward, send.stage - 1, send.microbatch};
}

double compute_seconds(const Action& a, const StageCosts& c) {
  switch (a.kind) {
    case Kind::kForward:
      return c.forward_seconds;
    case Kind::kBackward:
      return c.backward_input_seconds + c.backward_weight_seconds;
    case Kind::kBackwardInput:
      return c.backward_input_seconds;
    case Kind::kBackwardWeight:
      return c.backward_weight_seconds;
    default:
      return 0;
  }
}

}  // namespace

std::vector<StageCosts> uniform_costs(int stages, double seconds) {
  StageCosts c;
  c.forward_seconds = seconds;
  c.backward_input_seconds = seconds;
  c.backward_weight_seconds = seconds;
  c.activation_bytes = 1;
  return std::vector<StageCosts>(static_cast<size_t>(stages), c);
}

Simulation simulate(const Schedule& schedule, const std::vector<StageCosts>& costs) {
  const size_t ranks = schedule.actions.size();
  Simulation sim;
  sim.busy_seconds.assign(ranks, 0.0);
  sim.timeline.resize(ranks);
  sim.peak_in_flight.assign(static_cast<size_t>(schedule.stages), 0);
  sim.peak_activation_bytes.assign(static_cast<size_t>(schedule.stages), 0.0);
  std::vector<int> in_flight(static_cast<size_t>(schedule.stages), 0);
  std::vector<size_t> next(ranks, 0);
  std::vector<double> clock(ranks, 0.0);
  std::map<MessageKey, double> arrivals;

  const auto cost_of = [&](int stage) -> const StageCosts& {
    return costs.at(static_cast<size_t>(stage));
  };
  bool progress = true;
  size_t remaining = 0;
  for (const auto& list : schedule.actions) remaining += list.size();
  while (remaining > 0 && progress) {
    progress = false;
    for (size_t r = 0; r < ranks; ++r) {
      const auto& list = schedule.actions[r];
      while (next[r] < list.size()) {
        const Action& a = list[next[r]];
        TimedAction timed{a, clock[r], clock[r]};
        if (a.kind == Kind::kRecvForward || a.kind == Kind::kRecvBackward) {
          auto it = arrivals.find({a.kind, a.stage, a.microbatch});
          if (it == arrivals.end()) break;  // its send has not run yet
          clock[r] = std::max(clock[r], it->second);
          arrivals.erase(it);
        } else if (a.kind == Kind::kSendForward || a.kind == Kind::kSendBackward) {
          arrivals[message_of_send(a)] = clock[r] + cost_of(a.stage).send_seconds;
        } else {
          const double seconds = compute_seconds(a, cost_of(a.stage));
          clock[r] += seconds;
          sim.busy_seconds[r] += seconds;
          const size_t s = static_cast<size_t>(a.stage);
          if (a.kind == Kind::kForward) {
            sim.peak_in_flight[s] = std::max(sim.peak_in_flight[s], ++in_flight[s]);
          } else if (a.kind == Kind::kBackward || a.kind == Kind::kBackwardInput) {
            --in_flight[s];
          }
        }
        timed.end = clock[r];
        sim.timeline[r].push_back(timed);
        ++next[r];
        --remaining;
        progress = true;
      }
    }
  }
  for (size_t r = 0; r < ranks; ++r) sim.step_seconds = std::max(sim.step_seconds, clock[r]);
  for (size_t s = 0; s < sim.peak_in_flight.size(); ++s) {
    sim.peak_activation_bytes[s] =
        sim.peak_in_flight[s] * cost_of(static_cast<int>(s)).activation_bytes;
  }
  double busy = 0;
  for (double b : sim.busy_seconds) busy += b;
  if (sim.step_seconds > 0 && ranks > 0) {
    sim.bubble_fraction = 1.0 - busy / (sim.step_seconds * static_cast<double>(ranks));
  }
  if (remaining > 0) {
    sim.deadlocked = true;
    for (size_t r = 0; r < ranks; ++r) {
      if (next[r] >= schedule.actions[r].size()) continue;
      if (!sim.deadlock.empty()) sim.deadlock += "; ";
      sim.deadlock += "rank " + std::to_string(r) + " waits at " +
                      to_string(schedule.actions[r][next[r]]) + " (action " +
                      std::to_string(next[r]) + ")";
    }
  }
  return sim;
}

}  // namespace loom::parallel::pipeline
