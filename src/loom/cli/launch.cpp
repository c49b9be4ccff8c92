#include "loom/cli/launch.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "loom/cli/launch_agreement.h"
#include "loom/cli/rank_output.h"
#include "loom/cli/stop_signals.h"
#include "loom/comm/store_server.h"
#include "loom/core/error.h"
#include "loom/core/keyed_hash.h"
#include "loom/core/termination.h"

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
                                   "LOOM_RESTARTS=",
                                   "LOOM_PS_SERVERS="};
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
  layout.servers = total_servers;
  const auto& mine = counts[static_cast<size_t>(node_rank)];
  for (int i = 0; i < mine.first; ++i) layout.worker_ranks.push_back(workers_before + i);
  for (int i = 0; i < mine.second; ++i) {
    layout.server_ranks.push_back(total_workers + servers_before + i);
  }
  return layout;
}

namespace {

pid_t spawn(const std::vector<std::string>& command, const std::vector<std::string>& env,
            const sigset_t& original_mask, const RankOutputRelay::ChildEnds* output) {
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
    if (output) {
      ::dup2(output->out, 1);
      ::dup2(output->err, 2);
    }
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
  std::optional<RankOutputRelay> relay;
  if (!plan.log_line_prefix.empty()) relay.emplace();
  for (int local = 0; local < local_world; ++local) {
    Rank& r = ranks[static_cast<size_t>(local)];
    r.server = local >= plan.procs_per_node;
    r.rank = r.server ? layout.server_ranks[static_cast<size_t>(local - plan.procs_per_node)]
                      : layout.worker_ranks[static_cast<size_t>(local)];
    const Placement at{r.rank, local, layout.world, local_world};
    std::vector<std::string> env = rank_environment(plan, at, port, launch_id, token);
    env.push_back("LOOM_RESTART_COUNT=" + std::to_string(attempt));
    // The job's server count, for parallel.ps.servers (and parallel.mode: ps).
    if (layout.servers > 0) env.push_back("LOOM_PS_SERVERS=" + std::to_string(layout.servers));
    if (!restarts.empty()) env.push_back("LOOM_RESTARTS=" + restarts);
    if (relay) {
      const RankOutputRelay::ChildEnds ends = relay->attach(rank_line_prefix(
          plan.log_line_prefix, r.server ? "server" : "rank", r.rank, local, plan.node_rank));
      // A pipe is no terminal: Python would hold a rank's lines back until 8 KB or its end.
      if (!std::getenv("PYTHONUNBUFFERED")) env.push_back("PYTHONUNBUFFERED=1");
      r.pid = spawn(r.server ? server_command(plan.command) : plan.command, env, original, &ends);
      relay->close_child_ends(ends);
    } else {
      r.pid = spawn(r.server ? server_command(plan.command) : plan.command, env, original, nullptr);
    }
    r.running = true;
  }
  if (relay) relay->start();

  AttemptResult result;
  const Rank* failed = nullptr;
  bool preempted = false;
  int interrupted = 0;
  bool heard_stop = false;  // another node's failure, read from the store
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
      if (relay) relay->drain();  // the rank's last lines before what is said of its end
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
        if (plan.nodes > 1) {
          // When it happened (a rank's end is seen at once: SIGCHLD wakes the launcher), for
          // node 0 to tell the first failure from the ones it caused on other nodes; then the
          // others are told: with restarts they stop their ranks, without they only know why
          // their ranks are about to fail.
          job.set(attempt_key("failure", attempt) + "/" + std::to_string(plan.node_rank),
                  std::to_string(unix_microseconds()) + " " + result.cause);
          job.set(attempt_key("stop", attempt), result.cause);
        }
      } catch (const Error& e) {
        std::fprintf(stderr, "loom launch: the job's store: %s\n", e.what());
      }
      stop_all(SIGINT);
    }
    if (plan.nodes > 1 && running > 0 && result.cause.empty() && !interrupted && !heard_stop) {
      try {
        if (auto cause = job.value(attempt_key("stop", attempt))) {
          job.heard(*cause);
          heard_stop = true;
          if (plan.max_restarts > 0) {
            result.cause = *cause;
            std::fprintf(stderr, "loom launch: %s; stopping this node's ranks\n", cause->c_str());
            stop_all(SIGINT);
          }
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
  if (relay) relay->finish();
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

// Every attempt of the job on this node, until one ends without a restart: its exit code.
int run_attempts(const LaunchPlan& plan, int port, const std::string& token, JobStore& job,
                 const sigset_t& handled, const sigset_t& original) {
  std::vector<train::RestartRecord> restarts;
  for (int attempt = 0;; ++attempt) {
    const NodeLayout layout = layout_of_node(node_counts(plan, job, attempt), plan.node_rank);
    const AttemptResult result =
        run_attempt(plan, layout, port, token, attempt,
                    restarts.empty() ? "" : restarts_text(restarts), job, handled, original);
    if (result.outcome != AttemptResult::kFailed) return result.exit_code;

    const RestartDecision decision = decide_restart(plan, job, attempt, result, layout.world);
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

}  // namespace

int launch_ranks(const LaunchPlan& plan) {
  // Signals are taken synchronously with sigtimedwait. The stop signals have been held since
  // the process started (cli/stop_signals.h), so that none is lost while LibTorch loads; SIGCHLD
  // joins them before any thread starts (the store's), so that no thread can receive one and
  // end the launcher without the ranks hearing of it. The ranks get the mask the process
  // started with, from before that hold.
  const sigset_t stop = stop_signals();
  const sigset_t& original = start_signal_mask();
  sigset_t handled = stop, entry;
  sigaddset(&handled, SIGCHLD);
  ::pthread_sigmask(SIG_BLOCK, &handled, &entry);
  struct RestoreMask {
    const sigset_t& entry;
    ~RestoreMask() { ::pthread_sigmask(SIG_SETMASK, &entry, nullptr); }
  } restore_mask{entry};
  if (const int sig = take_stop_signal()) {
    std::fprintf(stderr, "loom launch: got %s while starting; ending now\n",
                 signal_name(sig).c_str());
    return 128 + sig;
  }

  // Node 0 serves the rendezvous store for the whole job, as torchrun's agent does; the ranks
  // only connect to it. It lives as long as the ranks do, over every restart, and then until
  // every other node's launcher is done with it (leave_job).
  std::unique_ptr<comm::StoreServer> store;
  int port = plan.master_port;
  const std::string token = store_token_of(plan);
  if (plan.node_rank == 0) {
    store = std::make_unique<comm::StoreServer>(plan.master_addr, port,
                                                comm::StoreServerOptions{token});
    port = store->port();
  }
  try {
    // One connection for every attempt; declared after the server, so that it closes first.
    JobStore job(plan, port, token, stop);
    // Node 0 tells the other nodes why the job cannot go on, before it stops serving the store.
    auto announce_end = [&](const Error& e) {
      if (plan.nodes == 1 || plan.node_rank != 0) return;
      try {
        job.announce_end(e.what());
      } catch (const Error&) {
      }
    };
    int exit_code = 0;
    try {
      exit_code = run_attempts(plan, port, token, job, handled, original);
    } catch (const LaunchInterrupted& e) {
      announce_end(e);
      throw;  // a signal ends the launcher at once
    } catch (const Error& e) {
      announce_end(e);
      leave_job(plan, job, "1 " + std::string(e.what()));
      throw;
    }
    leave_job(plan, job, std::to_string(exit_code));
    return exit_code;
  } catch (const LaunchInterrupted& e) {
    std::fprintf(stderr, "loom launch: %s\n", e.what());
    return 128 + e.signal();
  }
}

}  // namespace loom::cli
