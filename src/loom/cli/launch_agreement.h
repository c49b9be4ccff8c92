// How the launchers of one job agree through node 0's store (keys under loom/launch/): the
// layout of each attempt's nodes, and after a failure its cause and whether the job starts again;
// and where they read the ranks' heartbeats and stall reports. Internal to cli/ (launch.cpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "loom/cli/launch.h"
#include "loom/comm/store_text.h"
#include "loom/comm/tcp_store.h"
#include "loom/train/trainer.h"

namespace loom::cli {

// How one attempt of the job ended on this node.
struct AttemptResult {
  enum Outcome { kSucceeded, kPreempted, kFailed, kInterrupted } outcome = kSucceeded;
  int exit_code = 0;
  std::string cause;  // kFailed: which rank failed and how ("node 1: rank 3 was killed ...")
};

// The launcher's connection to node 0's store, where the nodes' launchers agree on stopping and
// restarting (keys under loom/launch/), and read the ranks' heartbeats and stall reports.
class JobStore {
 public:
  JobStore(const LaunchPlan& plan, int port, const std::string& token)
      : address_(plan.master_addr + ":" + std::to_string(port)),
        store_(plan.master_addr, port,
               std::chrono::milliseconds(static_cast<long>(plan.join_timeout_seconds * 1000)),
               token) {}

  comm::TcpStore& store() { return store_; }
  const std::string& address() const { return address_; }  // "host:port", for messages

  std::optional<std::string> value(const std::string& key) {
    return comm::text_if_set(store_, key);
  }
  void set(const std::string& key, const std::string& text) { comm::set_text(store_, key, text); }

  // The first report of a stall watchdog among the ranks of `attempt`, or "".
  std::string stall_report(int attempt, int world);
  // The furthest step any rank of `attempt` was heard at (-1: none beat, or unknown).
  int64_t furthest_step(int attempt, int world);

 private:
  std::string address_;
  comm::TcpStore store_;
};

// "loom/launch/<what>/<attempt>".
std::string attempt_key(const std::string& what, int attempt);
// Wall-clock microseconds: when a node saw a failure, comparable across nodes.
int64_t unix_microseconds();

// Every node's (workers, servers) for one attempt, agreed through node 0's store: each launcher
// puts its own; node 0 waits for the others', naming those that never came, and publishes the
// layout that every launcher then uses. From a restart on, node 0 goes on without nodes that do
// not come back in time, if --nnodes MIN nodes and --min-nproc ranks are left.
std::vector<std::pair<int, int>> node_counts(const LaunchPlan& plan, JobStore& job, int attempt);

// After a failed attempt, once every node's launcher has stopped its ranks: why it failed, and
// whether the job starts again (decided by node 0 and told to the other nodes through the
// store). Throws TimeoutError naming a node that does not report back.
struct RestartDecision {
  bool restart = false;
  train::RestartRecord record;  // the cause: the earliest failure any node saw
};

RestartDecision decide_restart(const LaunchPlan& plan, JobStore& job, int attempt,
                               const AttemptResult& result, int world);

// The LOOM_RESTARTS text for the next attempt's ranks.
std::string restarts_text(const std::vector<train::RestartRecord>& restarts);

}  // namespace loom::cli
