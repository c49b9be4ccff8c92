#include "loom/cli/launch_roles.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "loom/cli/commands.h"
#include "loom/comm/cluster_roles.h"
#include "loom/core/error.h"

namespace loom::cli {
namespace {

comm::ClusterRoles read_roles(const RoleOptions& o) {
  if (!o.data_worker_hosts.empty()) return comm::roles_from_list(o.data_worker_hosts, "");
  if (std::getenv("SLURM_HET_SIZE") || std::getenv("SLURM_PACK_SIZE")) {
    return comm::roles_from_slurm([](const char* name) { return std::getenv(name); },
                                  o.data_group.empty() ? "1" : o.data_group);
  }
  if (std::filesystem::exists(o.cluster_config)) {
    return comm::roles_from_sagemaker(read_user_file(o.cluster_config, "--cluster-config"),
                                      o.cluster_config,
                                      o.data_group.empty() ? "data_group" : o.data_group);
  }
  throw ConfigError(
      "--roles auto: no cluster description: give --data-worker-hosts, run in a Slurm "
      "heterogeneous job, or point --cluster-config at a SageMaker resourceconfig.json (" +
      o.cluster_config + " does not exist)");
}

[[noreturn]] void become_data_worker(const comm::ClusterRoles& roles, const RoleOptions& o) {
  if (o.data_roots.empty()) {
    throw ConfigError("--data-root: this host (" + roles.this_host +
                      ") is a data worker and needs the folders it may read");
  }
  const std::string self = std::filesystem::read_symlink("/proc/self/exe");
  std::vector<std::string> args = {self,
                                   "data-worker",
                                   "--listen",
                                   roles.this_host + ":" + std::to_string(o.data_port),
                                   "--exit-when-idle",
                                   std::to_string(o.exit_when_idle_s)};
  for (const auto& root : o.data_roots) args.insert(args.end(), {"--data-root", root});
  if (o.data_threads > 0) args.insert(args.end(), {"--threads", std::to_string(o.data_threads)});
  if (!o.token_file.empty()) args.insert(args.end(), {"--token-file", o.token_file});
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::fflush(nullptr);
  // The stop signals stay held across the exec (cli/stop_signals.h), and one that came is still
  // pending there: the data worker takes it as soon as it has started.
  ::execv(self.c_str(), argv.data());
  throw Error("launch: cannot run " + self + " data-worker");
}

}  // namespace

int launch_with_roles(LaunchPlan plan, const RoleOptions& o, bool master_given) {
  if (o.roles != "auto") throw ConfigError("--roles: expected 'auto', got '" + o.roles + "'");
  const comm::ClusterRoles roles = read_roles(o);
  std::fprintf(stderr, "loom launch: %s\n", roles.describe().c_str());
  if (roles.is_data_worker()) become_data_worker(roles, o);

  if (plan.command.size() < 2 || plan.command[1] != "train") {
    throw ConfigError(
        "--roles auto: the command must be `loom train ...` (it is given the "
        "data workers as data.remote.workers)");
  }
  std::string workers;
  for (const auto& host : roles.data_worker_hosts) {
    workers += (workers.empty() ? "" : ",") + host + ":" + std::to_string(o.data_port);
  }
  plan.command.insert(plan.command.end(), {"--set", "data.remote.workers=" + workers});
  if (!o.token_file.empty()) {
    plan.command.insert(plan.command.end(), {"--set", "data.remote.token_file=" + o.token_file});
  }
  // A description lists the trainer hosts: they are this launch's nodes, the first one serving
  // the rendezvous store. (With a plain list, --nnodes / --node-rank / --master say it.)
  if (!roles.trainer_hosts.empty()) {
    plan.nodes = static_cast<int>(roles.trainer_hosts.size());
    plan.node_rank = roles.node_rank();
    if (plan.nodes > 1 && !master_given) {
      plan.master_addr = roles.trainer_hosts.front();
      plan.master_port = o.master_port;
    }
  } else if (plan.nodes > 1 && !master_given) {
    throw ConfigError("--master: a run over " + std::to_string(plan.nodes) +
                      " nodes needs the address and port of node 0's store (--master ADDR:PORT)");
  }
  return launch_ranks(plan);
}

}  // namespace loom::cli
