// `loom launch --roles auto`: the same command on every host of a heterogeneous cluster. Each
// host reads the cluster's description (SageMaker's resourceconfig.json, a Slurm heterogeneous
// job, or --data-worker-hosts) and either becomes a `loom data-worker` or launches the training
// ranks with data.remote.workers pointing at the data-worker hosts.
#pragma once

#include <string>
#include <vector>

#include "loom/cli/launch.h"

namespace loom::cli {

struct RoleOptions {
  std::string roles;                           // "" (no roles: plain launch) or "auto"
  std::vector<std::string> data_worker_hosts;  // a plain list, instead of a description
  std::string cluster_config = "/opt/ml/input/config/resourceconfig.json";  // SageMaker's
  std::string data_group;  // "" = "data_group" (SageMaker) or component 1 (Slurm)
  int data_port = 7070;
  std::vector<std::string> data_roots;
  int data_threads = 0;  // 0: the worker's usable cores
  std::string token_file;
  int master_port = 29500;  // of the first trainer host's store, when several hosts train
  int exit_when_idle_s = 300;
};

// Runs this host's role: replaces this process with `loom data-worker`, or launches the ranks
// (see launch_ranks). Throws ConfigError for a description it cannot use.
int launch_with_roles(LaunchPlan plan, const RoleOptions& options, bool master_given);

}  // namespace loom::cli
