// `loom launch --nproc-per-node N [--nnodes M --node-rank R --master ADDR:PORT] -- COMMAND...`
#include <string>
#include <vector>

#include "loom/cli/commands.h"
#include "loom/cli/launch.h"
#include "loom/core/error.h"

namespace loom::cli {
namespace {

// "host:port" -> plan.master_addr / master_port.
void parse_master(const std::string& text, LaunchPlan& plan) {
  const auto colon = text.rfind(':');
  const std::string port = colon == std::string::npos ? "" : text.substr(colon + 1);
  char* end = nullptr;
  const long value = port.empty() ? -1 : std::strtol(port.c_str(), &end, 10);
  if (colon == 0 || value <= 0 || value > 65535 || *end != '\0') {
    throw ConfigError("--master: expected ADDR:PORT with a port in 1..65535, got '" + text + "'");
  }
  plan.master_addr = text.substr(0, colon);
  plan.master_port = static_cast<int>(value);
}

void check_plan(const LaunchPlan& plan, bool master_given) {
  if (plan.procs_per_node < 1) throw ConfigError("--nproc-per-node: must be at least 1");
  if (plan.nodes < 1) throw ConfigError("--nnodes: must be at least 1");
  if (plan.node_rank < 0 || plan.node_rank >= plan.nodes) {
    throw ConfigError("--node-rank: " + std::to_string(plan.node_rank) + " is not below --nnodes " +
                      std::to_string(plan.nodes));
  }
  if (plan.nodes > 1 && !master_given) {
    throw ConfigError("--master: a run over " + std::to_string(plan.nodes) +
                      " nodes needs the address and port of node 0's store (--master ADDR:PORT)");
  }
  if (plan.grace_seconds < 0) throw ConfigError("--grace: must not be negative");
}

}  // namespace

Command add_launch_command(CLI::App& app) {
  auto plan = std::make_shared<LaunchPlan>();
  auto master = std::make_shared<std::string>();
  CLI::App* sub = app.add_subcommand("launch",
                                     "Start the ranks of a data-parallel job on this node: loom "
                                     "launch --nproc-per-node 2 -- loom train ...");
  sub->add_option("--nproc-per-node", plan->procs_per_node, "Ranks to start on this node")
      ->capture_default_str();
  sub->add_option("--nnodes", plan->nodes, "Nodes in the job")->capture_default_str();
  sub->add_option("--node-rank", plan->node_rank, "This node's index, 0..nnodes-1")
      ->capture_default_str();
  sub->add_option(
      "--master", *master,
      "ADDR:PORT of the rendezvous store, served by node 0 (default: 127.0.0.1 and a free port)");
  sub->add_option("--grace", plan->grace_seconds,
                  "Seconds the other ranks get to stop after one fails, before SIGKILL")
      ->capture_default_str();
  sub->add_option("command", plan->command, "The command each rank runs (after --)")->required();
  return {sub, [plan, master] {
            if (!master->empty()) parse_master(*master, *plan);
            check_plan(*plan, !master->empty());
            return launch_ranks(*plan);
          }};
}

}  // namespace loom::cli
