// How a run's parallel layout did, for its summary and the advisor: ParallelLayout::report()
// fills the part every layout has, and each piece of the layout (LayoutPiece::describe, and its
// LayoutMetrics) adds its own.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "loom/parallel/ps/server_load.h"

namespace loom::parallel {

struct LayoutReport {
  std::string exchange;  // GradSync::describe()
  std::string backend;   // of the training ranks' communicator; "" for one process
  // Every training rank's forward, backward and optimizer seconds over the steady steps, by
  // rank (data parallelism and parameter servers; empty otherwise).
  std::vector<double> worker_compute_seconds;
  // Parameter servers: their totals (rank 0's view), hosts, and the plan's largest part.
  std::vector<ServerLoad> servers;
  std::vector<std::string> server_hosts;
  std::int64_t largest_part_bytes = 0;
  // Pipelines: the schedule, blocks per stage ("4,6"), every pipeline rank's peak of tensor
  // memory while training, and a micro-batch count the plan simulated with a smaller bubble
  // (0: none) with that bubble; the plan as `loom pipeline plan` prints it (rank 0).
  std::string schedule, split, plan_text;
  std::vector<double> peak_bytes;
  int64_t better_microbatches = 0;
  double better_bubble = 0;
  // Tensor groups: the model's plan as applied (pattern and style, in the plan's words), and how
  // many of the parameters it cut.
  std::vector<std::pair<std::string, std::string>> tensor_plan;
  int64_t tensor_cut_parameters = 0;
};

}  // namespace loom::parallel
