// The rank supervisor behind `loom launch`: starts this node's ranks with torchrun-style
// environment variables, forwards SIGINT/SIGTERM to them, and when one rank fails stops the
// others (SIGTERM, then SIGKILL after a grace period) and reports which rank failed and how.
#pragma once

#include <string>
#include <vector>

namespace loom::cli {

struct LaunchPlan {
  int procs_per_node = 1;
  int nodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  // 0: node 0 picks a free port (single-node runs only)
  double grace_seconds = 10;
  std::vector<std::string> command;
};

// Runs the ranks to completion. Returns 0 when all succeeded; otherwise the first failed rank's
// exit status (1 when it was killed by a signal), or 128 + signal when the launcher itself was
// interrupted. Messages about ranks go to stderr.
int launch_ranks(const LaunchPlan& plan);

}  // namespace loom::cli
