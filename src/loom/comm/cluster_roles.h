// Which role this host plays in a heterogeneous cluster (trainer hosts plus CPU-only hosts that
// run `loom data-worker`), read from the cluster's own description, so that one command can run
// unchanged on every host (`loom launch --roles auto`):
//
//   SageMaker   /opt/ml/input/config/resourceconfig.json: "current_host" and "instance_groups"
//               ([{"instance_group_name", "instance_type", "hosts"}]); the group named
//               `data_group` (default "data_group", as in AWS's heterogeneous-cluster examples)
//               preprocesses, every other group trains.
//   Slurm       a heterogeneous job: SLURM_HET_SIZE components whose nodes are in
//               SLURM_JOB_NODELIST_HET_GROUP_<n> (Slurm before 20.02: _PACK_GROUP_<n>); the
//               component numbered `data_group` (default 1) preprocesses, the others train.
//               This host is SLURMD_NODENAME (Slurm tells a task its node, not its component).
//   a list      --data-worker-hosts h1,h2: those hosts preprocess; every other host trains.
//
// The result is a plan (data, printed before anything starts): the trainer hosts in order (node
// rank = position, the first serves the rendezvous store) and the data-worker hosts.
#pragma once

#include <string>
#include <vector>

#include "loom/comm/world_info.h"

namespace loom::comm {

struct ClusterRoles {
  std::string source;  // "SageMaker resourceconfig.json", "Slurm heterogeneous job", ...
  std::string this_host;
  std::vector<std::string> trainer_hosts;
  std::vector<std::string> data_worker_hosts;

  bool is_data_worker() const;
  // This host's index among the trainer hosts; -1 for a data worker, or when the trainer hosts
  // are not listed (a --data-worker-hosts list: the launch's --node-rank says it).
  int node_rank() const;
  std::string describe() const;
};

// Throws ConfigError naming the file, key or variable that is missing or malformed, and when
// this host is in no group or no group would train or preprocess.
ClusterRoles roles_from_sagemaker(const std::string& json_text, const std::string& origin,
                                  const std::string& data_group);
ClusterRoles roles_from_slurm(const EnvLookup& env, const std::string& data_group);
ClusterRoles roles_from_list(const std::vector<std::string>& data_worker_hosts,
                             const std::string& this_host);

// A Slurm node list: "node[01-03,7],gpu5" -> node01 node02 node03 node7 gpu5. Ranges keep the
// low bound's zero padding; several bracket groups multiply ("r[0-1]n[1-2]"). Throws ConfigError
// naming `what` when malformed.
std::vector<std::string> expand_slurm_hostlist(const std::string& list, const std::string& what);

}  // namespace loom::comm
