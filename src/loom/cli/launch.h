// The rank supervisor behind `loom launch`: starts this node's ranks (workers, and parameter
// servers with --servers) with torchrun-style environment variables, forwards SIGINT/SIGTERM to
// them, and when one rank fails stops the others (SIGINT, then SIGKILL after a grace period),
// reports which rank failed and how (with a stall watchdog's report when there is one), and
// restarts the whole job from its last checkpoint up to --max-restarts times. With several
// nodes and restarts, the launchers agree on stopping and restarting through node 0's store.
#pragma once

#include <string>
#include <vector>

namespace loom::cli {

struct LaunchPlan {
  int procs_per_node = 1;
  // Parameter servers started on this node (parallel.mode: ps). Every node's workers take the
  // first ranks, node by node, and the servers the last ones; with several nodes the launchers
  // agree on the layout through node 0's store, so nodes may differ (servers-only hosts).
  int servers_per_node = 0;
  double join_timeout_seconds = 300;  // for the other nodes' launchers to check in
  // At the end, node 0 serves the store until every node's launcher is done with it, at most
  // this long (torch elastic's exit barrier waits 300 s too).
  double exit_timeout_seconds = 300;
  int nodes = 1;
  // After a restart the job may go on without nodes that do not come back, if this many are
  // left (--nnodes MIN:MAX; 0 or `nodes`: all must come back) and, over them, at least
  // min_procs training ranks (--min-nproc). `loom train` keeps data.global_batch, so every step
  // trains on the same samples with fewer ranks.
  int min_nodes = 0;
  int min_procs = 0;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  // 0: node 0 picks a free port (single-node runs only)
  // After SIGTERM is passed on: a `loom train` rank finishes its step and commits a checkpoint
  // (within train.preempt_grace_s, 30 s by default); after a failure the others get SIGINT.
  // Ranks still running this long after either are SIGKILLed.
  double grace_seconds = 40;
  // Restarts of the whole job after a failed rank, each from the run's last checkpoint
  // (`loom train` resumes when LOOM_RESTART_COUNT > 0). Preemption is not a failure.
  int max_restarts = 0;
  // The job's secret for the rendezvous store, given to the ranks as LOOM_STORE_TOKEN. Empty:
  // LOOM_STORE_TOKEN of the launcher's environment, or, for a one-node job, a fresh random one;
  // a multi-node job without one runs an open store and says so.
  std::string store_token;
  // Every line of a rank's output reaches the launcher's stdout or stderr whole, after this
  // prefix (${role}: rank or server, ${rank}, ${local_rank}, ${node}); empty: the ranks write
  // to the launcher's stdout and stderr themselves.
  std::string log_line_prefix = "[${role} ${rank}] ";
  std::vector<std::string> command;
};

// Runs the ranks to completion. Returns 0 when all succeeded; kPreemptedExitCode (75) when
// ranks stopped for SIGTERM with their checkpoint committed; otherwise the first failed rank's
// exit status (1 when it was killed by a signal) once no restart is left, or 128 + signal when
// the launcher itself was interrupted (also while it waits for other nodes). Messages about
// ranks go to stderr. Throws for a job that cannot start (a node that never joins).
int launch_ranks(const LaunchPlan& plan);

// Where this node's processes sit in the job: the job's rank of each worker and server.
struct NodeLayout {
  int world = 0;
  int servers = 0;  // parameter servers in the whole job
  std::vector<int> worker_ranks, server_ranks;
};
// From every node's worker and server counts (index = node rank).
NodeLayout layout_of_node(const std::vector<std::pair<int, int>>& counts, int node_rank);

}  // namespace loom::cli
