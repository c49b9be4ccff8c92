// `loom launch --nproc-per-node N [--servers K] [--nnodes M --node-rank R --master ADDR:PORT]
// -- COMMAND...`

#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "loom/cli/commands.h"
#include "loom/cli/launch.h"
#include "loom/cli/launch_roles.h"
#include "loom/core/device.h"
#include "loom/core/error.h"
#include "loom/core/keyed_hash.h"
#include "loom/core/topology.h"

namespace loom::cli {
namespace {

// "host:port" -> plan.master_addr / master_port. `source` names where the text came from.
void parse_master(const std::string& text, LaunchPlan& plan, const std::string& source) {
  const auto colon = text.rfind(':');
  const std::string port = colon == std::string::npos ? "" : text.substr(colon + 1);
  char* end = nullptr;
  const long value = port.empty() ? -1 : std::strtol(port.c_str(), &end, 10);
  if (colon == 0 || value <= 0 || value > 65535 || *end != '\0') {
    throw ConfigError(source + ": expected ADDR:PORT with a port in 1..65535, got '" + text + "'");
  }
  plan.master_addr = text.substr(0, colon);
  plan.master_port = static_cast<int>(value);
}

// `text` as a whole number in min..100000, or nothing.
std::optional<int> whole_number(const std::string& text, long min) {
  char* end = nullptr;
  const long value = text.empty() ? -1 : std::strtol(text.c_str(), &end, 10);
  if (value < min || value > 100000 || *end != '\0') return std::nullopt;
  return static_cast<int>(value);
}

// torchrun's values of --nproc-per-node: a count, "cpu" (the usable cores: affinity and cgroup
// quota, which is a pod's CPU limit), "gpu" (the CUDA devices) or "auto" (the CUDA devices when
// there are any, else as "cpu"). torchrun counts every core for "cpu"; a pod's limit is what
// its ranks may use.
int parse_nproc(const std::string& text, const std::string& source) {
  if (text == "cpu" || text == "gpu" || text == "auto") {
    const int devices = cuda_availability().devices;
    if (text == "gpu" && devices == 0) {
      throw ConfigError(source + "=gpu: this host has no CUDA device; give a number of ranks");
    }
    return text != "cpu" && devices > 0 ? devices : detect_topology().usable_cores;
  }
  const std::optional<int> ranks = whole_number(text, 0);
  if (!ranks) {
    throw ConfigError(source + ": expected a number of ranks, cpu, gpu or auto, got '" + text +
                      "'");
  }
  return *ranks;
}

int parse_node_rank(const std::string& text, const std::string& source) {
  const std::optional<int> rank = whole_number(text, 0);
  if (!rank) throw ConfigError(source + ": expected a node index, got '" + text + "'");
  return *rank;
}

// "N" or "MIN:MAX" -> plan.nodes (the most) and plan.min_nodes (0 for "N": all of them, also
// when --roles auto learns the number of nodes from the cluster's description).
void parse_nnodes(const std::string& text, LaunchPlan& plan, const std::string& source) {
  const auto colon = text.find(':');
  auto number = [&](const std::string& part) {
    const std::optional<int> nodes = whole_number(part, 1);
    if (!nodes) {
      throw ConfigError(source + ": expected N or MIN:MAX with 1 <= MIN <= MAX, got '" + text +
                        "'");
    }
    return *nodes;
  };
  plan.nodes = number(text.substr(0, colon == std::string::npos ? text.size() : colon));
  plan.min_nodes = 0;
  if (colon != std::string::npos) {
    plan.min_nodes = plan.nodes;
    plan.nodes = number(text.substr(colon + 1));
    if (plan.min_nodes > plan.nodes) {
      throw ConfigError(source + ": MIN " + std::to_string(plan.min_nodes) + " exceeds MAX " +
                        std::to_string(plan.nodes));
    }
  }
}

void check_plan(const LaunchPlan& plan, bool master_given) {
  if (plan.procs_per_node < 0 || (plan.procs_per_node == 0 && plan.servers_per_node == 0)) {
    throw ConfigError(
        "--nproc-per-node: must be at least 1 (or 0 on a node that only serves, "
        "with --servers)");
  }
  if (plan.servers_per_node < 0) throw ConfigError("--servers: must not be negative");
  if (plan.join_timeout_seconds <= 0) throw ConfigError("--join-timeout: must be positive");
  if (plan.exit_timeout_seconds < 0) throw ConfigError("--exit-timeout: must not be negative");
  if (plan.nodes < 1) throw ConfigError("--nnodes: must be at least 1");
  if (plan.node_rank < 0 || plan.node_rank >= plan.nodes) {
    throw ConfigError("--node-rank: " + std::to_string(plan.node_rank) + " is not below --nnodes " +
                      std::to_string(plan.nodes));
  }
  if (plan.nodes > 1 && !master_given) {
    throw ConfigError("--master: a run over " + std::to_string(plan.nodes) +
                      " nodes needs the address and port of node 0's store (--master ADDR:PORT, "
                      "or PET_MASTER_ADDR and PET_MASTER_PORT)");
  }
  if (plan.grace_seconds < 0) throw ConfigError("--grace: must not be negative");
}

// Where this node sits in the job. torchrun takes each of these options from PET_<OPTION> when
// the command line does not give it (torch/distributed/argparse_util.py), and so does loom
// launch: Kubeflow's PyTorchJob and TrainJob (a JobSet) start every node's launcher with
// PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK, PET_MASTER_ADDR and PET_MASTER_PORT.
struct NodeOptions {
  std::string nnodes = "1";
  std::string nproc_per_node = "1";
  std::string node_rank = "0";
  std::string master;
  CLI::Option* nnodes_option = nullptr;
  CLI::Option* nproc_option = nullptr;
  CLI::Option* node_rank_option = nullptr;
  CLI::Option* master_option = nullptr;
};

// PET_<OPTION>, or nullptr when it is unset or empty.
const char* torchrun_variable(const char* name) {
  const char* value = std::getenv(name);
  return value && *value ? value : nullptr;
}

// The option's text and what to call it in errors: the command line's, else PET_<OPTION>'s.
std::pair<std::string, std::string> given(const CLI::Option* option, const std::string& text,
                                          const char* flag, const char* variable) {
  if (option->count() == 0) {
    if (const char* value = torchrun_variable(variable)) return {value, variable};
  }
  return {text, flag};
}

// Fills the plan's node options; returns whether the store's address was given.
bool apply_node_options(const NodeOptions& options, LaunchPlan& plan) {
  const auto nnodes = given(options.nnodes_option, options.nnodes, "--nnodes", "PET_NNODES");
  parse_nnodes(nnodes.first, plan, nnodes.second);
  const auto nproc =
      given(options.nproc_option, options.nproc_per_node, "--nproc-per-node", "PET_NPROC_PER_NODE");
  plan.procs_per_node = parse_nproc(nproc.first, nproc.second);
  const auto rank =
      given(options.node_rank_option, options.node_rank, "--node-rank", "PET_NODE_RANK");
  plan.node_rank = parse_node_rank(rank.first, rank.second);
  if (plan.node_rank >= plan.nodes) {
    throw ConfigError(rank.second + ": " + std::to_string(plan.node_rank) + " is not below " +
                          nnodes.second + " " + std::to_string(plan.nodes),
                      {{"key", rank.second},
                       {"value", std::to_string(plan.node_rank)},
                       {"nodes", std::to_string(plan.nodes)}});
  }
  if (!options.master.empty()) {
    parse_master(options.master, plan, "--master");
    return true;
  }
  const char* addr = torchrun_variable("PET_MASTER_ADDR");
  const char* port = torchrun_variable("PET_MASTER_PORT");
  if (!addr && !port) return false;
  // torchrun's defaults for either half: --master-addr 127.0.0.1, --master-port 29500.
  parse_master(std::string(addr ? addr : "127.0.0.1") + ":" + (port ? port : "29500"), plan,
               "PET_MASTER_ADDR:PET_MASTER_PORT");
  return true;
}

}  // namespace

Command add_launch_command(CLI::App& app) {
  auto plan = std::make_shared<LaunchPlan>();
  auto node = std::make_shared<NodeOptions>();
  CLI::App* sub = app.add_subcommand("launch",
                                     "Start the ranks of a data-parallel job on this node: loom "
                                     "launch --nproc-per-node 2 -- loom train ...");
  node->nproc_option = sub->add_option("--nproc-per-node", node->nproc_per_node,
                                       "Ranks to start on this node: a number, cpu (one per usable "
                                       "core), gpu (one per CUDA device) or auto (gpu when there "
                                       "is one, else cpu); default: PET_NPROC_PER_NODE, else 1");
  sub->add_option("--servers", plan->servers_per_node,
                  "Parameter servers to start on this node; they take the last ranks, and every "
                  "rank runs with parallel.mode=ps and parallel.ps.servers = the job's total")
      ->capture_default_str();
  node->nnodes_option =
      sub->add_option("--nnodes", node->nnodes,
                      "Nodes in the job: N, or MIN:MAX to go on after a restart (--max-restarts) "
                      "without nodes that do not come back, as long as MIN are left; default: "
                      "PET_NNODES, else 1");
  sub->add_option("--min-nproc", plan->min_procs,
                  "After a restart, go on only if at least this many training ranks are left "
                  "over the nodes that came back")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--join-timeout", plan->join_timeout_seconds,
                  "Seconds node 0 waits for the other nodes' launchers to check in")
      ->capture_default_str();
  sub->add_option("--exit-timeout", plan->exit_timeout_seconds,
                  "Seconds node 0 keeps serving the job's store, once its ranks are done, until "
                  "the other nodes' launchers are done with it too")
      ->capture_default_str();
  node->node_rank_option =
      sub->add_option("--node-rank", node->node_rank,
                      "This node's index, 0..nnodes-1; default: PET_NODE_RANK, else 0");
  node->master_option = sub->add_option(
      "--master", node->master,
      "ADDR:PORT of the rendezvous store, served by node 0; default: PET_MASTER_ADDR and "
      "PET_MASTER_PORT (29500 when only the address is set), else 127.0.0.1 and a free port");
  sub->add_option("--grace", plan->grace_seconds,
                  "Seconds ranks get to stop after SIGTERM is passed on (a preempted `loom "
                  "train` commits its checkpoint in train.preempt_grace_s) or after another "
                  "rank failed, before SIGKILL")
      ->capture_default_str();
  sub->add_option("--max-restarts", plan->max_restarts,
                  "Restart every rank from the run's last checkpoint after a rank fails, up to "
                  "this many times (`loom train` needs --out); a preemption is not a failure")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--log-line-prefix", plan->log_line_prefix,
                  "Put this before every line of a rank's output (${role}, ${rank}, "
                  "${local_rank}, ${node}); '' leaves the output as the ranks write it")
      ->capture_default_str();
  sub->add_option("command", plan->command, "The command each rank runs (after --)")->required();
  auto roles = std::make_shared<RoleOptions>();
  const char* group = "Heterogeneous clusters (--roles auto)";
  sub->add_option("--roles", roles->roles,
                  "auto: decide from the cluster's description whether this host trains or "
                  "runs a data worker")
      ->group(group);
  sub->add_option("--data-worker-hosts", roles->data_worker_hosts,
                  "Hosts that run data workers (comma-separated); every other host trains")
      ->delimiter(',')
      ->group(group);
  sub->add_option("--cluster-config", roles->cluster_config,
                  "SageMaker's resource configuration (read when present)")
      ->capture_default_str()
      ->group(group);
  sub->add_option("--data-group", roles->data_group,
                  "The group of data-worker hosts: a SageMaker instance group name (default "
                  "data_group) or a Slurm heterogeneous component number (default 1)")
      ->group(group);
  sub->add_option("--data-port", roles->data_port, "Port of every data worker")
      ->capture_default_str()
      ->check(CLI::Range(1, 65535))
      ->group(group);
  sub->add_option("--data-root", roles->data_roots, "A folder data workers may read (repeatable)")
      ->group(group);
  sub->add_option("--data-threads", roles->data_threads,
                  "Batches a data worker builds at once (default: its usable cores)")
      ->group(group);
  sub->add_option("--token-file", roles->token_file,
                  "The job's shared secret: the rendezvous store and the data workers refuse "
                  "clients that cannot prove they hold it (default for one node: a fresh random "
                  "one; see docs/security.md)");
  sub->add_option("--master-port", roles->master_port,
                  "Port of the rendezvous store on the first trainer host, when several train")
      ->capture_default_str()
      ->check(CLI::Range(1, 65535))
      ->group(group);
  sub->add_option("--exit-when-idle", roles->exit_when_idle_s,
                  "A data worker exits when no trainer asked for anything for this many seconds")
      ->capture_default_str()
      ->group(group);
  return {sub,
          [plan, node, roles] {
            const bool master_given = apply_node_options(*node, *plan);
            if (!roles->token_file.empty()) {
              plan->store_token = read_token_file(roles->token_file, "--token-file");
            }
            if (!roles->roles.empty()) {
              check_plan(*plan, true);  // the description may supply the nodes and master
              return launch_with_roles(*plan, *roles, master_given);
            }
            if (!roles->data_worker_hosts.empty()) {
              throw ConfigError("--data-worker-hosts: only with --roles auto");
            }
            check_plan(*plan, master_given);
            return launch_ranks(*plan);
          },
          /*handles_stop_signals=*/true};
}

}  // namespace loom::cli
