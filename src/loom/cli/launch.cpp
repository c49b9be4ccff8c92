#include "loom/cli/launch.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "loom/comm/rendezvous.h"
#include "loom/comm/store_server.h"
#include "loom/comm/store_wait.h"
#include "loom/comm/tcp_store.h"
#include "loom/core/error.h"
#include "loom/core/keyed_hash.h"
#include "loom/core/termination.h"
#include "loom/train/stall_watchdog.h"
#include "loom/train/trainer.h"

extern char** environ;

namespace loom::cli {
namespace {

struct Rank {
  int rank = 0;
  bool server = false;  // a parameter server
  pid_t pid = -1;
  bool running = false;
  int status = 0;
};

// "rank 3", or "parameter server rank 5".
std::string describe_rank(const Rank& r) {
  return std::string(r.server ? "parameter server rank " : "rank ") + std::to_string(r.rank);
}

struct Placement {
  int rank = 0, local_rank = 0, world = 0, local_world = 0;
};

// The environment of one rank: ours, minus any previous rank variables, plus its own.
std::vector<std::string> rank_environment(const LaunchPlan& plan, const Placement& at, int port,
                                          const std::string& launch_id, const std::string& token) {
  static const char* replaced[] = {"RANK=",
                                   "WORLD_SIZE=",
                                   "LOCAL_RANK=",
                                   "LOCAL_WORLD_SIZE=",
                                   "GROUP_RANK=",
                                   "MASTER_ADDR=",
                                   "MASTER_PORT=",
                                   "LOOM_LAUNCH_ID=",
                                   "LOOM_STORE_TOKEN=",
                                   "LOOM_RESTART_COUNT=",
                                   "LOOM_RESTARTS="};
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    bool keep = true;
    for (const char* prefix : replaced)
      keep = keep && std::strncmp(*e, prefix, std::strlen(prefix)) != 0;
    if (keep) env.emplace_back(*e);
  }
  env.push_back("RANK=" + std::to_string(at.rank));
  env.push_back("WORLD_SIZE=" + std::to_string(at.world));
  env.push_back("LOCAL_RANK=" + std::to_string(at.local_rank));
  env.push_back("LOCAL_WORLD_SIZE=" + std::to_string(at.local_world));
  env.push_back("GROUP_RANK=" + std::to_string(plan.node_rank));
  env.push_back("MASTER_ADDR=" + plan.master_addr);
  env.push_back("MASTER_PORT=" + std::to_string(port));
  env.push_back("LOOM_LAUNCH_ID=" + launch_id);
  if (!token.empty()) env.push_back("LOOM_STORE_TOKEN=" + token);
  return env;
}

// A server runs the workers' command; `loom train ...` becomes `loom ps-server ...`, which takes
// the same arguments, so that process lists say what each process is.
std::vector<std::string> server_command(const std::vector<std::string>& command) {
  std::vector<std::string> server = command;
  if (server.size() >= 2 && server[1] == "train") {
    const std::string& program = server[0];
    const auto slash = program.rfind('/');
    if (program.substr(slash == std::string::npos ? 0 : slash + 1) == "loom") {
      server[1] = "ps-server";
    }
  }
  return server;
}

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

// Every node's (workers, servers) for one attempt, agreed through node 0's store: each launcher
// puts its own; node 0 waits for the others', naming those that never came, and publishes the
// layout that every launcher then uses. From a restart on, node 0 goes on without nodes that do
// not come back in time, if --nnodes MIN nodes and --min-nproc ranks are left.
std::vector<std::pair<int, int>> node_counts(const LaunchPlan& plan, int port,
                                             const std::string& token, int attempt) {
  std::vector<std::pair<int, int>> counts(static_cast<size_t>(plan.nodes));
  counts[static_cast<size_t>(plan.node_rank)] = {plan.procs_per_node, plan.servers_per_node};
  if (plan.nodes == 1) return counts;
  const auto timeout =
      std::chrono::milliseconds(static_cast<long>(plan.join_timeout_seconds * 1000));
  const std::string waited = std::to_string(static_cast<long>(plan.join_timeout_seconds)) + " s";
  const std::string restart =
      attempt > 0 ? " to come back for restart " + std::to_string(attempt) : std::string();
  comm::TcpStore store(plan.master_addr, port, timeout, token);
  const std::string prefix = comm::key_for_attempt("loom/launch/node/", attempt);
  const std::string layout_key = comm::key_for_attempt("loom/launch/layout", attempt);
  auto set = [&](const std::string& key, const std::string& text) {
    store.set(key, std::vector<uint8_t>(text.begin(), text.end()));
  };
  auto get = [&](const std::string& key) {
    const auto bytes = store.get(key);
    return std::string(bytes.begin(), bytes.end());
  };
  set(prefix + std::to_string(plan.node_rank),
      std::to_string(plan.procs_per_node) + " " + std::to_string(plan.servers_per_node));
  if (plan.node_rank == 0) {
    std::vector<std::string> keys;
    for (int node = 0; node < plan.nodes; ++node) keys.push_back(prefix + std::to_string(node));
    const std::vector<std::size_t> missing = comm::wait_for_keys(store, keys, timeout);
    if (!missing.empty() && !may_go_on_without(plan, missing.size(), attempt)) {
      throw TimeoutError("launch: node 0 waited " + waited + " for the launchers of node(s) " +
                         node_list(missing) + restart + " of " + std::to_string(plan.nodes) +
                         " at " + plan.master_addr + ":" + std::to_string(port));
    }
    std::string layout;
    int workers = 0;
    for (int node = 0; node < plan.nodes; ++node) {
      auto& count = counts[static_cast<size_t>(node)];
      const bool gone = std::find(missing.begin(), missing.end(), node) != missing.end();
      if (!gone)
        std::sscanf(get(keys[static_cast<size_t>(node)]).c_str(), "%d %d", &count.first,
                    &count.second);
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
    set(layout_key, layout);
    return counts;
  }
  if (!comm::wait_for_keys(store, {layout_key}, timeout).empty()) {
    throw TimeoutError("launch: node " + std::to_string(plan.node_rank) + " waited " + waited +
                       " for node 0's launcher at " + plan.master_addr + ":" +
                       std::to_string(port) + " to settle the job's layout" +
                       (attempt > 0 ? " for restart " + std::to_string(attempt) : std::string()));
  }
  std::istringstream layout(get(layout_key));
  for (auto& count : counts) layout >> count.first >> count.second;
  const auto& mine = counts[static_cast<size_t>(plan.node_rank)];
  if (mine.first + mine.second == 0 && plan.procs_per_node + plan.servers_per_node > 0) {
    throw Error("launch: the job went on without node " + std::to_string(plan.node_rank) +
                ", which came back too late for restart " + std::to_string(attempt));
  }
  return counts;
}

}  // namespace

NodeLayout layout_of_node(const std::vector<std::pair<int, int>>& counts, int node_rank) {
  int total_workers = 0, total_servers = 0, workers_before = 0, servers_before = 0;
  for (size_t n = 0; n < counts.size(); ++n) {
    if (static_cast<int>(n) < node_rank) {
      workers_before += counts[n].first;
      servers_before += counts[n].second;
    }
    total_workers += counts[n].first;
    total_servers += counts[n].second;
  }
  NodeLayout layout;
  layout.world = total_workers + total_servers;
  const auto& mine = counts[static_cast<size_t>(node_rank)];
  for (int i = 0; i < mine.first; ++i) layout.worker_ranks.push_back(workers_before + i);
  for (int i = 0; i < mine.second; ++i) {
    layout.server_ranks.push_back(total_workers + servers_before + i);
  }
  return layout;
}

namespace {

pid_t spawn(const std::vector<std::string>& command, const std::vector<std::string>& env,
            const sigset_t& original_mask) {
  // Everything the child needs is built before fork: after it, only exec-safe calls.
  std::vector<char*> argv, envp;
  for (const auto& a : command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    // A process group per rank: signals then reach whatever the rank started, too.
    ::setpgid(0, 0);
    ::sigprocmask(SIG_SETMASK, &original_mask, nullptr);
    ::signal(SIGPIPE, SIG_DFL);  // loom ignores it (main.cpp); the rank's command decides
    ::execvpe(argv[0], argv.data(), envp.data());
    const char message[] = "loom launch: cannot execute the rank's command\n";
    (void)!::write(2, message, sizeof message - 1);
    ::_exit(127);
  }
  if (pid < 0) throw Error(std::string("launch: fork failed: ") + std::strerror(errno));
  ::setpgid(pid, pid);  // also here, so that the group exists before any signal is passed on
  return pid;
}

std::string describe_status(int status) {
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    return std::string("was killed by signal ") + std::to_string(sig) + " (SIG" +
           sigabbrev_np(sig) + ")";
  }
  const int code = WEXITSTATUS(status);
  std::string text = "exited with status " + std::to_string(code);
  if (code == 127) text += " (its command could not be executed)";
  return text;
}

void signal_running(std::vector<Rank>& ranks, int sig) {
  for (auto& r : ranks) {
    if (r.running) ::kill(-r.pid, sig);  // the rank's process group
  }
}

std::chrono::steady_clock::time_point seconds_from_now(double seconds) {
  return std::chrono::steady_clock::now() +
         std::chrono::duration_cast<std::chrono::steady_clock::duration>(
             std::chrono::duration<double>(seconds));
}

std::string store_token_of(const LaunchPlan& plan) {
  if (!plan.store_token.empty()) return plan.store_token;
  if (const char* token = std::getenv("LOOM_STORE_TOKEN"); token && *token) return token;
  if (plan.nodes == 1) return random_hex(32);
  std::fprintf(stderr,
               "loom launch: warning: no --token-file or LOOM_STORE_TOKEN: the store at %s "
               "accepts any client that reaches its port (docs/security.md)\n",
               plan.master_addr.c_str());
  return "";
}

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
      : store_(plan.master_addr, port,
               std::chrono::milliseconds(static_cast<long>(plan.join_timeout_seconds * 1000)),
               token) {}

  comm::TcpStore& store() { return store_; }

  std::optional<std::string> value(const std::string& key) {
    if (!store_.check({key})) return std::nullopt;
    const auto bytes = store_.get(key);
    return std::string(bytes.begin(), bytes.end());
  }
  void set(const std::string& key, const std::string& text) {
    store_.set(key, std::vector<uint8_t>(text.begin(), text.end()));
  }

  // The first report of a stall watchdog among the ranks of `attempt`, or "".
  std::string stall_report(int attempt, int world) {
    for (int r = 0; r < world; ++r) {
      if (auto report = value(comm::key_for_attempt(train::stall_key(r), attempt))) {
        return *report;
      }
    }
    return "";
  }

  // The furthest step any rank of `attempt` was heard at (-1: none beat, or unknown).
  int64_t furthest_step(int attempt, int world) {
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

 private:
  comm::TcpStore store_;
};

int64_t unix_microseconds() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string attempt_key(const std::string& what, int attempt) {
  return "loom/launch/" + what + "/" + std::to_string(attempt);
}

// Starts this node's ranks of one attempt and supervises them until all have ended. A rank that
// fails (or, with several nodes and --max-restarts, a failure another node's launcher announced
// through the store) stops the others with SIGINT, which ends them at once: unlike SIGTERM,
// which asks `loom train` to finish its step and commit a checkpoint, a step that waits for the
// failed rank would never finish. Without restarts, nodes do not tell each other: their ranks
// fail on their own and name whom they waited for.
AttemptResult run_attempt(const LaunchPlan& plan, const NodeLayout& layout, int port,
                          const std::string& token, int attempt, const std::string& restarts,
                          JobStore& job, const sigset_t& handled, const sigset_t& original) {
  const std::string launch_id = random_hex(8);
  const int local_world = static_cast<int>(layout.worker_ranks.size() + layout.server_ranks.size());
  std::vector<Rank> ranks(static_cast<size_t>(local_world));
  for (int local = 0; local < local_world; ++local) {
    Rank& r = ranks[static_cast<size_t>(local)];
    r.server = local >= plan.procs_per_node;
    r.rank = r.server ? layout.server_ranks[static_cast<size_t>(local - plan.procs_per_node)]
                      : layout.worker_ranks[static_cast<size_t>(local)];
    const Placement at{r.rank, local, layout.world, local_world};
    std::vector<std::string> env = rank_environment(plan, at, port, launch_id, token);
    env.push_back("LOOM_RESTART_COUNT=" + std::to_string(attempt));
    if (!restarts.empty()) env.push_back("LOOM_RESTARTS=" + restarts);
    r.pid = spawn(r.server ? server_command(plan.command) : plan.command, env, original);
    r.running = true;
  }

  AttemptResult result;
  const Rank* failed = nullptr;
  bool preempted = false;
  int interrupted = 0;
  std::chrono::steady_clock::time_point kill_at{};
  auto stop_all = [&](int sig) {
    signal_running(ranks, sig);
    if (kill_at == std::chrono::steady_clock::time_point{}) {
      kill_at = seconds_from_now(plan.grace_seconds);
    }
  };
  int running = local_world;
  while (running > 0) {
    siginfo_t info;
    const timespec tick{0, 200'000'000};
    const int sig = ::sigtimedwait(&handled, &info, &tick);
    if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) {
      if (!interrupted)
        std::fprintf(stderr, "loom launch: got SIG%s, passing it to the ranks\n",
                     sigabbrev_np(sig));
      interrupted = sig;
      stop_all(sig);
    }
    for (auto& r : ranks) {
      if (!r.running || ::waitpid(r.pid, &r.status, WNOHANG) != r.pid) continue;
      r.running = false;
      --running;
      const bool exited = WIFEXITED(r.status);
      if (exited && WEXITSTATUS(r.status) == kPreemptedExitCode) preempted = true;
      const bool ok =
          exited && (WEXITSTATUS(r.status) == 0 || WEXITSTATUS(r.status) == kPreemptedExitCode);
      if (ok || failed || interrupted || !result.cause.empty()) continue;
      failed = &r;
      result.cause = describe_rank(r) + " " + describe_status(r.status);
      if (plan.nodes > 1)
        result.cause = "node " + std::to_string(plan.node_rank) + ": " + result.cause;
      std::fprintf(stderr, "loom launch: %s (pid %d) %s; stopping the other ranks\n",
                   describe_rank(r).c_str(), static_cast<int>(r.pid),
                   describe_status(r.status).c_str());
      try {
        if (const std::string report = job.stall_report(attempt, layout.world); !report.empty())
          std::fprintf(stderr, "loom launch: stall watchdog: %s\n", report.c_str());
        if (plan.nodes > 1 && plan.max_restarts > 0) {
          // When it happened (a rank's end is seen at once: SIGCHLD wakes the launcher), for
          // node 0 to tell the first failure from the ones it caused on other nodes; then the
          // others are told to stop their ranks.
          job.set(attempt_key("failure", attempt) + "/" + std::to_string(plan.node_rank),
                  std::to_string(unix_microseconds()) + " " + result.cause);
          job.set(attempt_key("stop", attempt), result.cause);
        }
      } catch (const Error& e) {
        std::fprintf(stderr, "loom launch: the job's store: %s\n", e.what());
      }
      stop_all(SIGINT);
    }
    if (plan.nodes > 1 && plan.max_restarts > 0 && running > 0 && result.cause.empty() &&
        !interrupted) {
      try {
        if (auto cause = job.value(attempt_key("stop", attempt))) {
          result.cause = *cause;
          std::fprintf(stderr, "loom launch: %s; stopping this node's ranks\n", cause->c_str());
          stop_all(SIGINT);
        }
      } catch (const Error&) {
        // Node 0 gone: its ranks' peers fail on their own, and the launcher sees them end.
      }
    }
    if (running > 0 && kill_at != std::chrono::steady_clock::time_point{} &&
        std::chrono::steady_clock::now() > kill_at) {
      std::fprintf(stderr,
                   "loom launch: %d rank(s) still running %.0f s after being stopped; "
                   "killing them\n",
                   running, plan.grace_seconds);
      signal_running(ranks, SIGKILL);
      kill_at = std::chrono::steady_clock::time_point::max();
    }
  }
  if (!result.cause.empty()) {
    result.outcome = AttemptResult::kFailed;
    const int code = failed && WIFEXITED(failed->status) ? WEXITSTATUS(failed->status) : 1;
    result.exit_code = code == 0 ? 1 : code;
  } else if (preempted) {
    result.outcome = AttemptResult::kPreempted;
    result.exit_code = kPreemptedExitCode;
  } else if (interrupted) {
    result.outcome = AttemptResult::kInterrupted;
    result.exit_code = 128 + interrupted;
  }
  return result;
}

// After a failed attempt, once every node's launcher has stopped its ranks: why it failed, and
// whether the job starts again (decided by node 0 and told to the other nodes through the
// store). Throws TimeoutError naming a node that does not report back.
struct RestartDecision {
  bool restart = false;
  train::RestartRecord record;  // the cause: the earliest failure any node saw
};

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

// The LOOM_RESTARTS text for the next attempt's ranks.
std::string restarts_text(const std::vector<train::RestartRecord>& restarts) {
  auto list = nlohmann::json::array();
  for (const auto& r : restarts) {
    list.push_back({{"cause", r.cause},
                    {"failed_at_step", r.failed_at_step},
                    {"resumed_from_step", r.resumed_from_step}});
  }
  return list.dump();
}

}  // namespace

int launch_ranks(const LaunchPlan& plan) {
  // Signals are taken synchronously with sigtimedwait; children get the original mask back.
  // Blocked before any thread starts (the store's), so that none of them can receive SIGINT or
  // SIGTERM and end the launcher without the ranks hearing of it.
  sigset_t handled, original;
  sigemptyset(&handled);
  for (int sig : {SIGCHLD, SIGINT, SIGTERM, SIGHUP}) sigaddset(&handled, sig);
  ::pthread_sigmask(SIG_BLOCK, &handled, &original);
  struct RestoreMask {
    const sigset_t& original;
    ~RestoreMask() { ::pthread_sigmask(SIG_SETMASK, &original, nullptr); }
  } restore_mask{original};

  // Node 0 serves the rendezvous store for the whole job, as torchrun's agent does; the ranks
  // only connect to it. It lives as long as the ranks do, over every restart.
  std::unique_ptr<comm::StoreServer> store;
  int port = plan.master_port;
  const std::string token = store_token_of(plan);
  if (plan.node_rank == 0) {
    store = std::make_unique<comm::StoreServer>(plan.master_addr, port,
                                                comm::StoreServerOptions{token});
    port = store->port();
  }
  // Declared after the server: its connection closes before the server stops.
  std::unique_ptr<JobStore> job;

  std::vector<train::RestartRecord> restarts;
  for (int attempt = 0;; ++attempt) {
    const NodeLayout layout =
        layout_of_node(node_counts(plan, port, token, attempt), plan.node_rank);
    if (!job) job = std::make_unique<JobStore>(plan, port, token);
    const AttemptResult result =
        run_attempt(plan, layout, port, token, attempt,
                    restarts.empty() ? "" : restarts_text(restarts), *job, handled, original);
    if (result.outcome != AttemptResult::kFailed) return result.exit_code;

    const RestartDecision decision = decide_restart(plan, *job, attempt, result, layout.world);
    if (!decision.restart) {
      std::fprintf(stderr, "loom launch: failed: %s%s\n", decision.record.cause.c_str(),
                   plan.max_restarts > 0
                       ? (" (after " + std::to_string(attempt) + " restart(s) of " +
                          std::to_string(plan.max_restarts) + " allowed)")
                             .c_str()
                       : "");
      return result.exit_code;
    }
    restarts.push_back(decision.record);
    std::fprintf(stderr,
                 "loom launch: restarting every rank from the last checkpoint (restart %d of %d) "
                 "after: %s\n",
                 attempt + 1, plan.max_restarts, decision.record.cause.c_str());
  }
}

}  // namespace loom::cli
