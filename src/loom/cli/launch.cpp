#include "loom/cli/launch.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>

#include "loom/comm/store_server.h"
#include "loom/core/error.h"

extern char** environ;

namespace loom::cli {
namespace {

struct Rank {
  int rank = 0;
  pid_t pid = -1;
  bool running = false;
  int status = 0;
};

// The environment of one rank: ours, minus any previous rank variables, plus its own.
std::vector<std::string> rank_environment(const LaunchPlan& plan, int local_rank, int port,
                                          const std::string& launch_id) {
  static const char* replaced[] = {
      "RANK=",       "WORLD_SIZE=",  "LOCAL_RANK=",  "LOCAL_WORLD_SIZE=",
      "GROUP_RANK=", "MASTER_ADDR=", "MASTER_PORT=", "LOOM_LAUNCH_ID="};
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    bool keep = true;
    for (const char* prefix : replaced)
      keep = keep && std::strncmp(*e, prefix, std::strlen(prefix)) != 0;
    if (keep) env.emplace_back(*e);
  }
  const int world = plan.nodes * plan.procs_per_node;
  env.push_back("RANK=" + std::to_string(plan.node_rank * plan.procs_per_node + local_rank));
  env.push_back("WORLD_SIZE=" + std::to_string(world));
  env.push_back("LOCAL_RANK=" + std::to_string(local_rank));
  env.push_back("LOCAL_WORLD_SIZE=" + std::to_string(plan.procs_per_node));
  env.push_back("GROUP_RANK=" + std::to_string(plan.node_rank));
  env.push_back("MASTER_ADDR=" + plan.master_addr);
  env.push_back("MASTER_PORT=" + std::to_string(port));
  env.push_back("LOOM_LAUNCH_ID=" + launch_id);
  return env;
}

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

std::string launch_token() {
  std::random_device device;
  char text[17];
  std::snprintf(text, sizeof text, "%08x%08x", device(), device());
  return text;
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

  // Node 0 serves the rendezvous store for the whole job, as torchrun's agent does; the ranks
  // only connect to it. It lives as long as the ranks do.
  std::unique_ptr<comm::StoreServer> store;
  int port = plan.master_port;
  if (plan.node_rank == 0) {
    try {
      store = std::make_unique<comm::StoreServer>(plan.master_addr, port);
    } catch (...) {
      ::pthread_sigmask(SIG_SETMASK, &original, nullptr);
      throw;
    }
    port = store->port();
  }

  const std::string launch_id = launch_token();
  std::vector<Rank> ranks(plan.procs_per_node);
  for (int local = 0; local < plan.procs_per_node; ++local) {
    ranks[local].rank = plan.node_rank * plan.procs_per_node + local;
    ranks[local].pid =
        spawn(plan.command, rank_environment(plan, local, port, launch_id), original);
    ranks[local].running = true;
  }

  const Rank* failed = nullptr;
  int interrupted = 0;
  std::chrono::steady_clock::time_point kill_at{};
  int running = plan.procs_per_node;
  while (running > 0) {
    siginfo_t info;
    const timespec tick{0, 200'000'000};
    const int sig = ::sigtimedwait(&handled, &info, &tick);
    if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) {
      if (!interrupted)
        std::fprintf(stderr, "loom launch: got SIG%s, passing it to the ranks\n",
                     sigabbrev_np(sig));
      interrupted = sig;
      signal_running(ranks, sig);
      if (kill_at == std::chrono::steady_clock::time_point{}) {
        kill_at = seconds_from_now(plan.grace_seconds);
      }
    }
    for (auto& r : ranks) {
      if (!r.running || ::waitpid(r.pid, &r.status, WNOHANG) != r.pid) continue;
      r.running = false;
      --running;
      const bool ok = WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0;
      if (!ok && !failed && !interrupted) {
        failed = &r;
        std::fprintf(stderr, "loom launch: rank %d (pid %d) %s; stopping the other ranks\n", r.rank,
                     static_cast<int>(r.pid), describe_status(r.status).c_str());
        signal_running(ranks, SIGTERM);
        kill_at = seconds_from_now(plan.grace_seconds);
      }
    }
    if (running > 0 && kill_at != std::chrono::steady_clock::time_point{} &&
        std::chrono::steady_clock::now() > kill_at) {
      std::fprintf(stderr,
                   "loom launch: %d rank(s) still running %.0f s after SIGTERM; killing them\n",
                   running, plan.grace_seconds);
      signal_running(ranks, SIGKILL);
      kill_at = std::chrono::steady_clock::time_point::max();
    }
  }
  store.reset();  // its thread ends before the signal mask is lifted
  ::pthread_sigmask(SIG_SETMASK, &original, nullptr);

  if (failed) {
    std::fprintf(stderr, "loom launch: failed: rank %d %s\n", failed->rank,
                 describe_status(failed->status).c_str());
    const int code = WIFEXITED(failed->status) ? WEXITSTATUS(failed->status) : 1;
    return code == 0 ? 1 : code;
  }
  if (interrupted) return 128 + interrupted;
  return 0;
}

}  // namespace loom::cli
