#include "loom/cli/launch_agreement.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "loom/comm/rendezvous.h"
#include "loom/comm/store_wait.h"
#include "loom/core/error.h"
#include "loom/train/stall_watchdog.h"

namespace loom::cli {
namespace {

// The node numbers listed, "1, 2".
std::string node_list(const std::vector<std::size_t>& nodes) {
  std::string list;
  for (std::size_t node : nodes) list += (list.empty() ? "" : ", ") + std::to_string(node);
  return list;
}

// Whether the job may go on without `missing` of its nodes: from a restart on, when at least
// --nnodes MIN of them are left.
bool may_go_on_without(const LaunchPlan& plan, std::size_t missing, int attempt) {
  const int least = plan.min_nodes > 0 ? plan.min_nodes : plan.nodes;
  return attempt > 0 && plan.nodes - static_cast<int>(missing) >= least;
}

}  // namespace

std::string JobStore::stall_report(int attempt, int world) {
  for (int r = 0; r < world; ++r) {
    if (auto report = value(comm::key_for_attempt(train::stall_key(r), attempt))) return *report;
  }
  return "";
}

int64_t JobStore::furthest_step(int attempt, int world) {
  int64_t furthest = -1;
  try {
    for (int r = 0; r < world; ++r) {
      train::Heartbeat beat;
      const auto text = value(comm::key_for_attempt(train::heartbeat_key(r), attempt));
      if (text && train::parse_heartbeat(*text, beat)) furthest = std::max(furthest, beat.step);
    }
  } catch (const Error&) {
    // The summary says null.
  }
  return furthest;
}

int64_t unix_microseconds() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string attempt_key(const std::string& what, int attempt) {
  return "loom/launch/" + what + "/" + std::to_string(attempt);
}

std::vector<std::pair<int, int>> node_counts(const LaunchPlan& plan, JobStore& job, int attempt) {
  std::vector<std::pair<int, int>> counts(static_cast<size_t>(plan.nodes));
  counts[static_cast<size_t>(plan.node_rank)] = {plan.procs_per_node, plan.servers_per_node};
  if (plan.nodes == 1) return counts;
  const auto timeout =
      std::chrono::milliseconds(static_cast<long>(plan.join_timeout_seconds * 1000));
  const std::string waited = std::to_string(static_cast<long>(plan.join_timeout_seconds)) + " s";
  const std::string restart =
      attempt > 0 ? " to come back for restart " + std::to_string(attempt) : std::string();
  comm::TcpStore& store = job.store();
  const std::string prefix = comm::key_for_attempt("loom/launch/node/", attempt);
  const std::string layout_key = comm::key_for_attempt("loom/launch/layout", attempt);
  job.set(prefix + std::to_string(plan.node_rank),
          std::to_string(plan.procs_per_node) + " " + std::to_string(plan.servers_per_node));
  if (plan.node_rank == 0) {
    std::vector<std::string> keys;
    for (int node = 0; node < plan.nodes; ++node) keys.push_back(prefix + std::to_string(node));
    const std::vector<std::size_t> missing = comm::wait_for_keys(store, keys, timeout);
    if (!missing.empty() && !may_go_on_without(plan, missing.size(), attempt)) {
      throw TimeoutError("launch: node 0 waited " + waited + " for the launchers of node(s) " +
                         node_list(missing) + restart + " of " + std::to_string(plan.nodes) +
                         " at " + job.address());
    }
    std::string layout;
    int workers = 0;
    for (int node = 0; node < plan.nodes; ++node) {
      auto& count = counts[static_cast<size_t>(node)];
      const bool gone = std::find(missing.begin(), missing.end(), node) != missing.end();
      if (!gone)
        std::sscanf(comm::get_text(store, keys[static_cast<size_t>(node)]).c_str(), "%d %d",
                    &count.first, &count.second);
      workers += count.first;
      layout += std::to_string(count.first) + " " + std::to_string(count.second) + " ";
    }
    if (workers < plan.min_procs) {
      throw Error("launch: only " + std::to_string(workers) + " rank(s) came" + restart +
                  ", fewer than --min-nproc " + std::to_string(plan.min_procs));
    }
    if (!missing.empty()) {
      std::fprintf(stderr,
                   "loom launch: going on without node(s) %s, which did not come back within %s "
                   "for restart %d: %d rank(s) now (--nnodes %d:%d)\n",
                   node_list(missing).c_str(), waited.c_str(), attempt, workers, plan.min_nodes,
                   plan.nodes);
    }
    job.set(layout_key, layout);
    return counts;
  }
  if (!comm::wait_for_keys(store, {layout_key}, timeout).empty()) {
    throw TimeoutError("launch: node " + std::to_string(plan.node_rank) + " waited " + waited +
                       " for node 0's launcher at " + job.address() +
                       " to settle the job's layout" +
                       (attempt > 0 ? " for restart " + std::to_string(attempt) : std::string()));
  }
  std::istringstream layout(comm::get_text(store, layout_key));
  for (auto& count : counts) layout >> count.first >> count.second;
  const auto& mine = counts[static_cast<size_t>(plan.node_rank)];
  if (mine.first + mine.second == 0 && plan.procs_per_node + plan.servers_per_node > 0) {
    throw Error("launch: the job went on without node " + std::to_string(plan.node_rank) +
                ", which came back too late for restart " + std::to_string(attempt));
  }
  return counts;
}

RestartDecision decide_restart(const LaunchPlan& plan, JobStore& job, int attempt,
                               const AttemptResult& result, int world) {
  RestartDecision decision;
  decision.record.cause = result.cause;
  // Without restarts every node ends on its own, as its ranks did.
  if (plan.max_restarts == 0) return decision;
  if (plan.nodes == 1) {
    decision.restart = attempt < plan.max_restarts;
    decision.record.failed_at_step = job.furthest_step(attempt, world);
    return decision;
  }
  const auto timeout =
      std::chrono::milliseconds(static_cast<long>(plan.join_timeout_seconds * 1000));
  const std::string stopped = attempt_key("stopped", attempt) + "/";
  const std::string decision_key = attempt_key("decision", attempt);
  job.set(stopped + std::to_string(plan.node_rank), "1");
  if (plan.node_rank == 0) {
    std::vector<std::string> keys;
    for (int node = 0; node < plan.nodes; ++node) keys.push_back(stopped + std::to_string(node));
    const auto missing = comm::wait_for_keys(job.store(), keys, timeout);
    // A node that does not report back is gone; the job may go on without it (--nnodes MIN:MAX).
    const bool enough = missing.empty() || may_go_on_without(plan, missing.size(), attempt + 1);
    decision.restart = enough && attempt < plan.max_restarts;
    // The first failure by the clock; the ones after it on other nodes are its consequences.
    int64_t first = std::numeric_limits<int64_t>::max();
    for (int node = 0; node < plan.nodes; ++node) {
      const auto report = job.value(attempt_key("failure", attempt) + "/" + std::to_string(node));
      if (!report) continue;
      const auto space = report->find(' ');
      const int64_t when = std::stoll(report->substr(0, space));
      if (when < first) {
        first = when;
        decision.record.cause = report->substr(space + 1);
      }
    }
    decision.record.failed_at_step = job.furthest_step(attempt, world);
    job.set(decision_key, nlohmann::json{{"restart", decision.restart},
                                         {"cause", decision.record.cause},
                                         {"failed_at_step", decision.record.failed_at_step}}
                              .dump());
    if (!missing.empty()) {
      const std::string what = "node(s) " + node_list(missing) +
                               " did not report their ranks stopped within " +
                               std::to_string(static_cast<long>(plan.join_timeout_seconds)) +
                               " s (--join-timeout) after: " + decision.record.cause;
      if (!enough) throw TimeoutError("launch: " + what);
      std::fprintf(stderr, "loom launch: %s\n", what.c_str());
    }
    return decision;
  }
  if (!comm::wait_for_keys(job.store(), {decision_key}, timeout).empty()) {
    throw TimeoutError("launch: node " + std::to_string(plan.node_rank) + " waited " +
                       std::to_string(static_cast<long>(plan.join_timeout_seconds)) +
                       " s for node 0's launcher to decide on a restart");
  }
  const auto told = nlohmann::json::parse(*job.value(decision_key));
  decision.restart = told.at("restart");
  decision.record.cause = told.at("cause");
  decision.record.failed_at_step = told.at("failed_at_step");
  return decision;
}

std::string restarts_text(const std::vector<train::RestartRecord>& restarts) {
  auto list = nlohmann::json::array();
  for (const auto& r : restarts) {
    list.push_back({{"cause", r.cause},
                    {"failed_at_step", r.failed_at_step},
                    {"resumed_from_step", r.resumed_from_step}});
  }
  return list.dump();
}

}  // namespace loom::cli
