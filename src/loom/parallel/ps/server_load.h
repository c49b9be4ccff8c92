// What one parameter server reports of its work so far in a run: it sends worker rank 0 its
// running totals after every step (ps_server.h), and its last ones when the workers end.
#pragma once

#include <cstdint>

namespace loom::parallel {

struct ServerLoad {
  std::int64_t steps = 0;
  std::int64_t bytes_in = 0, bytes_out = 0;
  double sum_seconds = 0;     // adding the workers' parts
  double active_seconds = 0;  // per step: first part received to last sum sent
  // Servers holding the parameters (async, SSP): the most steps of the slowest worker that
  // parameters it sent a worker lacked.
  std::int64_t max_staleness = 0;
  // CPU time of the server's process (all its threads) since it began serving: receiving,
  // summing and sending. Unlike active_seconds it leaves out waiting for the workers, so it
  // compares the servers' work even where one of them is handed the step's first part.
  double busy_seconds = 0;
};

}  // namespace loom::parallel
