// Runs a schedule on paper: every rank works through its actions in order, computations take
// their stage's profiled time, sends cost the sender nothing and arrive after the link's
// transfer time, a receive waits for its message. Gives the step time, the bubble, each stage's
// peak activation memory, and, for a schedule that cannot finish, which ranks wait for what.
//
// The outcome does not depend on the order the ranks are stepped in: an action's start depends
// only on its own rank's clock and on message arrival times, fixed when the send runs.
#pragma once

#include <string>
#include <vector>

#include "loom/parallel/pipeline/schedule.h"

namespace loom::parallel::pipeline {

// What one micro-batch costs on one stage.
struct StageCosts {
  double forward_seconds = 0;
  double backward_input_seconds = 0;   // I; a full backward B costs I + W
  double backward_weight_seconds = 0;  // W
  double activation_bytes = 0;         // kept from F until B (or I)
  double send_seconds = 0;             // moving its output (or input gradient) to the next rank
};

struct TimedAction {
  Action action;
  double start = 0, end = 0;  // a receive spans its wait
};

struct Simulation {
  double step_seconds = 0;                    // the last rank's finish
  double bubble_fraction = 0;                 // idle share of ranks x step time, 0..1
  std::vector<double> busy_seconds;           // per rank: computing
  std::vector<int> peak_in_flight;            // per stage: micro-batches whose activations are held
  std::vector<double> peak_activation_bytes;  // per stage
  std::vector<std::vector<TimedAction>> timeline;  // per rank, what ran when
  bool deadlocked = false;
  std::string deadlock;  // e.g. "rank 0 waits at 0RECV_B1 (action 5); rank 1 waits at ..."
};

// `costs` has one entry per stage. Does not validate: run validate() first for clear errors.
Simulation simulate(const Schedule& schedule, const std::vector<StageCosts>& costs);

// One cost per stage, every computation taking `seconds`: for dry runs.
std::vector<StageCosts> uniform_costs(int stages, double seconds = 1.0);

}  // namespace loom::parallel::pipeline
