// How the launchers of one job agree through node 0's store (keys under loom/launch/): the
// layout of each attempt's nodes, after a failure its cause and whether the job starts again,
// and at the end that every node is done with the store (the exit barrier); and where they read
// the ranks' heartbeats and stall reports. Internal to cli/ (launch.cpp).
#pragma once

#include <signal.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "loom/cli/launch.h"
#include "loom/comm/tcp_store.h"
#include "loom/core/error.h"
#include "loom/train/trainer.h"

namespace loom::cli {

// How one attempt of the job ended on this node.
struct AttemptResult {
  enum Outcome { kSucceeded, kPreempted, kFailed, kInterrupted } outcome = kSucceeded;
  int exit_code = 0;
  std::string cause;  // kFailed: which rank failed and how ("node 1: rank 3 was killed ...")
};

// SIGINT, SIGTERM or SIGHUP reached the launcher while it waited for other nodes: it ends at
// once (128 + signal) instead of waiting out --join-timeout.
class LaunchInterrupted : public Error {
 public:
  LaunchInterrupted(int signal, const std::string& waiting_for);
  int signal() const { return signal_; }

 private:
  int signal_;
};

// The launcher's connection to node 0's store, where the nodes' launchers agree on the layout,
// on stopping and restarting, and on leaving (keys under loom/launch/), and read the ranks'
// heartbeats and stall reports. Every wait also watches for a stop signal and for node 0's
// announcement that the job ended; an error from a store that went away says what this node
// last heard of the job, so that a node does not report only "lost the server" when node 0's
// ranks failed first.
//
// Threading: the launcher's main thread only.
class JobStore {
 public:
  // Connects, retrying until --join-timeout (node 0 may start after this node); a signal in
  // `stop_signals` meanwhile throws LaunchInterrupted.
  JobStore(const LaunchPlan& plan, int port, const std::string& token,
           const sigset_t& stop_signals);

  const std::string& address() const { return address_; }  // "host:port", for messages
  comm::TcpStore& store() { return *store_; }

  std::optional<std::string> value(const std::string& key);
  std::string get(const std::string& key);  // a key known to be set
  void set(const std::string& key, const std::string& text);

  // Waits until every key is set, polling, for at most `timeout`; returns the indices of those
  // still missing then. Throws LaunchInterrupted on a stop signal (`waiting_for` says for what),
  // and Error with node 0's reason when node 0 announced that the job ended.
  std::vector<std::size_t> wait_for(const std::vector<std::string>& keys,
                                    std::chrono::milliseconds timeout,
                                    const std::string& waiting_for);

  // What this node last heard went wrong in the job (a failure on some node), for messages.
  void heard(const std::string& news) { news_ = news; }
  // Node 0: the job ends without running (further); the other nodes' waits end with `why`.
  void announce_end(const std::string& why);

  // Node 0: the nodes taking part in the job now (those the last layout counts), whom the exit
  // barrier waits for.
  void set_nodes_in_job(std::vector<int> nodes) { nodes_in_job_ = std::move(nodes); }
  const std::vector<int>& nodes_in_job() const { return nodes_in_job_; }

  // The first report of a stall watchdog among the ranks of `attempt`, or "".
  std::string stall_report(int attempt, int world);
  // The furthest step any rank of `attempt` was heard at (-1: none beat, or unknown).
  int64_t furthest_step(int attempt, int world);

  // A stop signal waiting to be taken (0: none). Takes it.
  int take_stop_signal() const;

 private:
  // Runs `call` on the store; a store error is rethrown with what this node last heard.
  template <typename Call>
  auto guarded(Call&& call) -> decltype(call());

  std::string address_;
  int node_rank_;
  sigset_t stop_signals_;
  std::unique_ptr<comm::TcpStore> store_;
  std::string news_;
  std::vector<int> nodes_in_job_;
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

// The exit barrier, as torch elastic's agents end: every launcher reports that it is done with
// the job's store (`outcome` says how it ended), and node 0 keeps serving the store until every
// node in the job has, for at most --exit-timeout seconds, naming those that never did. A stop
// signal ends node 0's wait at once. Never throws: the job's own outcome is what counts.
void leave_job(const LaunchPlan& plan, JobStore& job, const std::string& outcome);

// The LOOM_RESTARTS text for the next attempt's ranks.
std::string restarts_text(const std::vector<train::RestartRecord>& restarts);

}  // namespace loom::cli
