#include "loom/cli/launch_agreement.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "loom/comm/rendezvous.h"
#include "loom/comm/store_text.h"
#include "loom/comm/store_wait.h"
#include "loom/core/error.h"
#include "loom/core/settings.h"
#include "loom/train/stall_watchdog.h"

namespace loom::cli {
namespace {

using Clock = std::chrono::steady_clock;

// A wait's slices: short enough that a signal or node 0's end is heard at once.
constexpr auto kPollSlice = std::chrono::milliseconds(100);
// One try to reach node 0's store; the tries go on until --join-timeout.
constexpr auto kConnectTry = std::chrono::seconds(2);

// Node 0 sets it when the job ends without running further, with the reason.
const std::string kEndKey = "loom/launch/end";

// The node numbers listed, "1, 2".
std::string node_list(const std::vector<std::size_t>& nodes) {
  std::string list;
  for (std::size_t node : nodes) list += (list.empty() ? "" : ", ") + std::to_string(node);
  return list;
}

std::chrono::milliseconds milliseconds_of(double seconds) {
  return std::chrono::milliseconds(static_cast<long>(seconds * 1000));
}

// Whether the job may go on without `missing` of its nodes: from a restart on, when at least
// --nnodes MIN of them are left.
bool may_go_on_without(const LaunchPlan& plan, std::size_t missing, int attempt) {
  const int least = plan.min_nodes > 0 ? plan.min_nodes : plan.nodes;
  return attempt > 0 && plan.nodes - static_cast<int>(missing) >= least;
}

}  // namespace

LaunchInterrupted::LaunchInterrupted(int signal, const std::string& waiting_for)
    : Error("got SIG" + std::string(sigabbrev_np(signal)) + " while waiting for " +
            waiting_for + "; ending now"),
      signal_(signal) {}

JobStore::JobStore(const LaunchPlan& plan, int port, const std::string& token,
                   const sigset_t& stop_signals)
    : address_(plan.master_addr + ":" + std::to_string(port)),
      node_rank_(plan.node_rank),
      stop_signals_(stop_signals) {
  const auto timeout = milliseconds_of(plan.join_timeout_seconds);
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    try {
      store_ = std::make_unique<comm::TcpStore>(plan.master_addr, port, kConnectTry, token);
      store_->setTimeout(timeout);
      return;
    } catch (const TimeoutError&) {
      if (Clock::now() >= deadline) {
        throw TimeoutError("launch: node " + std::to_string(plan.node_rank) + " found no store at " +
                           address_ + " within " +
                           std::to_string(static_cast<long>(plan.join_timeout_seconds)) +
                           " s (--join-timeout): is node 0's launcher running?");
      }
    }
    if (const int sig = take_stop_signal()) {
      throw LaunchInterrupted(sig, "node 0's store at " + address_);
    }
  }
}

int JobStore::take_stop_signal() const {
  siginfo_t info;
  const timespec now{0, 0};
  const int sig = ::sigtimedwait(&stop_signals_, &info, &now);
  return sig > 0 ? sig : 0;
}

template <typename Call>
auto JobStore::guarded(Call&& call) -> decltype(call()) {
  try {
    return call();
  } catch (const CommError& e) {
    throw CommError(std::string(e.what()) + "; node 0's launcher, which serves the store, " +
                    (news_.empty() ? "had reported no failure to this node"
                                   : "last reported: " + news_));
  }
}

std::optional<std::string> JobStore::value(const std::string& key) {
  return guarded([&] { return comm::text_if_set(*store_, key); });
}

std::string JobStore::get(const std::string& key) {
  return guarded([&] { return comm::get_text(*store_, key); });
}

void JobStore::set(const std::string& key, const std::string& text) {
  guarded([&] { comm::set_text(*store_, key, text); });
}

void JobStore::announce_end(const std::string& why) { set(kEndKey, why); }

std::vector<std::size_t> JobStore::wait_for(const std::vector<std::string>& keys,
                                            std::chrono::milliseconds timeout,
                                            const std::string& waiting_for) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    const auto slice = std::max(std::chrono::milliseconds(0),
                                std::min(left, std::chrono::milliseconds(kPollSlice)));
    const auto missing = guarded([&] { return comm::wait_for_keys(*store_, keys, slice); });
    if (missing.empty() || Clock::now() >= deadline) return missing;
    if (const int sig = take_stop_signal()) throw LaunchInterrupted(sig, waiting_for);
    if (auto end = node_rank_ == 0 ? std::nullopt : value(kEndKey)) {
      heard(*end);
      throw Error("launch: node 0's launcher ended the job: " + *end);
    }
  }
}

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
  const auto timeout = milliseconds_of(plan.join_timeout_seconds);
  const std::string waited = std::to_string(static_cast<long>(plan.join_timeout_seconds)) + " s";
  const std::string restart =
      attempt > 0 ? " to come back for restart " + std::to_string(attempt) : std::string();
  const std::string prefix = comm::key_for_attempt("loom/launch/node/", attempt);
  const std::string layout_key = comm::key_for_attempt("loom/launch/layout", attempt);
  job.set(prefix + std::to_string(plan.node_rank),
          std::to_string(plan.procs_per_node) + " " + std::to_string(plan.servers_per_node));
  if (plan.node_rank == 0) {
    std::vector<std::string> keys;
    for (int node = 0; node < plan.nodes; ++node) keys.push_back(prefix + std::to_string(node));
    const std::vector<std::size_t> missing =
        job.wait_for(keys, timeout, "the launchers of the other nodes to join");
    std::vector<int> present;
    for (int node = 0; node < plan.nodes; ++node) {
      if (std::find(missing.begin(), missing.end(), node) == missing.end()) present.push_back(node);
    }
    job.set_nodes_in_job(present);
    if (!missing.empty() && !may_go_on_without(plan, missing.size(), attempt)) {
      throw TimeoutError("launch: node 0 waited " + waited + " for the launchers of node(s) " +
                         node_list(missing) + restart + " of " + std::to_string(plan.nodes) +
                         " at " + job.address());
    }
    std::string layout;
    int workers = 0;
    for (int node : present) {
      auto& count = counts[static_cast<size_t>(node)];
      std::sscanf(job.get(keys[static_cast<size_t>(node)]).c_str(), "%d %d", &count.first,
                  &count.second);
    }
    for (const auto& count : counts) {
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
  // Testing aid: node 0 may now run its ranks to the end before this node reads the layout.
  if (const long long late = setting_int("LOOM_FAULT_LAUNCH_LATE_LAYOUT_MS"); late > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(late));
  }
  // Node 0 itself may wait --join-timeout for the other nodes before it settles the layout (and
  // says so, through the store, if it gives up): this node waits twice that.
  if (!job.wait_for({layout_key}, 2 * timeout, "node 0's launcher to settle the job's layout")
           .empty()) {
    throw TimeoutError("launch: node " + std::to_string(plan.node_rank) + " waited " +
                       std::to_string(2 * static_cast<long>(plan.join_timeout_seconds)) +
                       " s for node 0's launcher at " + job.address() +
                       " to settle the job's layout" +
                       (attempt > 0 ? " for restart " + std::to_string(attempt) : std::string()));
  }
  std::istringstream layout(job.get(layout_key));
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
  const auto timeout = milliseconds_of(plan.join_timeout_seconds);
  const std::string stopped = attempt_key("stopped", attempt) + "/";
  const std::string decision_key = attempt_key("decision", attempt);
  job.set(stopped + std::to_string(plan.node_rank), "1");
  if (plan.node_rank == 0) {
    std::vector<std::string> keys;
    for (int node = 0; node < plan.nodes; ++node) keys.push_back(stopped + std::to_string(node));
    const auto missing =
        job.wait_for(keys, timeout, "the other nodes to report their ranks stopped");
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
  // Node 0 decides after waiting up to --join-timeout for every node's report: twice that here.
  if (!job.wait_for({decision_key}, 2 * timeout, "node 0's launcher to decide on a restart")
           .empty()) {
    throw TimeoutError("launch: node " + std::to_string(plan.node_rank) + " waited " +
                       std::to_string(2 * static_cast<long>(plan.join_timeout_seconds)) +
                       " s for node 0's launcher to decide on a restart");
  }
  const auto told = nlohmann::json::parse(job.get(decision_key));
  decision.restart = told.at("restart");
  decision.record.cause = told.at("cause");
  decision.record.failed_at_step = told.at("failed_at_step");
  return decision;
}

void leave_job(const LaunchPlan& plan, JobStore& job, const std::string& outcome) {
  if (plan.nodes == 1) return;
  const std::string done = "loom/launch/done/";
  try {
    job.set(done + std::to_string(plan.node_rank), outcome);
  } catch (const Error& e) {
    if (plan.node_rank != 0) {
      std::fprintf(stderr, "loom launch: could not tell node 0 that this node is done: %s\n",
                   e.what());
    }
    return;
  }
  if (plan.node_rank != 0) return;
  std::vector<std::string> keys;
  std::vector<int> nodes;
  for (int node : job.nodes_in_job()) {
    if (node == 0) continue;
    keys.push_back(done + std::to_string(node));
    nodes.push_back(node);
  }
  if (keys.empty()) return;
  try {
    const auto missing = job.wait_for(keys, milliseconds_of(plan.exit_timeout_seconds),
                                      "the other nodes to finish with the job's store");
    if (missing.empty()) return;
    std::vector<std::size_t> late;
    for (std::size_t i : missing) late.push_back(static_cast<std::size_t>(nodes[i]));
    std::fprintf(stderr,
                 "loom launch: node(s) %s did not finish with the job's store within %.0f s "
                 "(--exit-timeout); closing it\n",
                 node_list(late).c_str(), plan.exit_timeout_seconds);
  } catch (const Error& e) {
    std::fprintf(stderr, "loom launch: %s\n", e.what());
  }
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
