// SIGTERM, SIGINT and SIGHUP at every moment of a command's life, start-up included (issue 39):
// `loom launch` ends with 128 + N and says what it was doing; `loom train`, `loom ps-server` and
// `loom data-worker` do what docs/reliability.md says. None of them may die of the signal.
//
// The moments count from the instant the process holds the signals (its SigBlk in /proc), which
// the `loom` front does in its first code, a fraction of a millisecond after exec and before any
// of LibTorch is loaded (cli/front.cpp). Before that no program can catch a signal: one sent in
// that window takes its default action whatever the program does, so a test that fired at the
// return of exec would only measure the kernel's and the loader's speed.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "tools/test_support.h"

extern char** environ;

namespace loom::test {
namespace {

using Clock = std::chrono::steady_clock;

// Whether `pid` blocks SIGTERM, SIGINT and SIGHUP now.
bool holds_stop_signals(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("SigBlk:", 0) != 0) continue;
    const unsigned long long mask = std::stoull(line.substr(7), nullptr, 16);
    auto bit = [](int sig) { return 1ull << (sig - 1); };
    const unsigned long long stop = bit(SIGTERM) | bit(SIGINT) | bit(SIGHUP);
    return (mask & stop) == stop;
  }
  return false;
}

// `loom ARGS...` started directly, with no shell in between, its output going to `log`. The
// constructor returns once the process holds the stop signals.
class HoldingLoom {
 public:
  HoldingLoom(const std::vector<std::string>& args, const std::string& log,
              const std::vector<std::string>& env = {}) {
    // Everything the child needs is built before fork.
    std::vector<std::string> strings = {test::loom_binary()};
    strings.insert(strings.end(), args.begin(), args.end());
    std::vector<char*> argv, envp;
    for (auto& a : strings) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<std::string> environment(env);
    for (char** e = environ; *e; ++e) {
      const std::string entry = *e;
      bool replaced = false;
      for (const auto& mine : env)
        replaced |= entry.rfind(mine.substr(0, mine.find('=') + 1), 0) == 0;
      if (!replaced) environment.push_back(entry);
    }
    for (auto& e : environment) envp.push_back(e.data());
    envp.push_back(nullptr);
    const int out = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    int exec_done[2];
    if (out < 0 || ::pipe2(exec_done, O_CLOEXEC) != 0) throw std::runtime_error("open " + log);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(out, 1);
      ::dup2(out, 2);
      // As from a shell: nothing blocked, nothing ignored (the test may run under nohup).
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      for (int sig : {SIGTERM, SIGINT, SIGHUP}) ::signal(sig, SIG_DFL);
      ::execve(argv[0], argv.data(), envp.data());
      const int error = errno;
      (void)!::write(exec_done[1], &error, sizeof error);
      ::_exit(127);
    }
    ::close(out);
    ::close(exec_done[1]);
    int error = 0;
    const bool failed = ::read(exec_done[0], &error, sizeof error) > 0;  // EOF: exec done
    ::close(exec_done[0]);
    if (pid_ < 0 || failed) throw std::runtime_error("cannot run " + strings[0]);
    const auto give_up = Clock::now() + std::chrono::seconds(10);
    while (!holds_stop_signals(pid_)) {
      if (!running()) {
        throw std::runtime_error("it ended (status " + std::to_string(wait()) +
                                 ") before it held the stop signals: " + read_text(log));
      }
      if (Clock::now() > give_up) {
        ::kill(pid_, SIGKILL);
        wait();
        throw std::runtime_error("it never held the stop signals");
      }
    }
  }
  ~HoldingLoom() {
    if (reaped_) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, &status_, 0);
  }
  HoldingLoom(const HoldingLoom&) = delete;
  HoldingLoom& operator=(const HoldingLoom&) = delete;

  void signal(int sig) { ::kill(pid_, sig); }
  bool running() {
    if (!reaped_ && ::waitpid(pid_, &status_, WNOHANG) == pid_) reaped_ = true;
    return !reaped_;
  }
  // Its exit code, or -(signal) when a signal ended it.
  int wait() {
    if (!reaped_) ::waitpid(pid_, &status_, 0);
    reaped_ = true;
    return WIFEXITED(status_) ? WEXITSTATUS(status_) : -WTERMSIG(status_);
  }

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
  int status_ = 0;
};

std::string name_of(int sig) { return std::string("SIG") + sigabbrev_np(sig); }

// One signal sent `after` the hold, and how the process ended.
struct Outcome {
  std::string what;  // the case, for failure messages
  int sig = 0;
  int status = 0;
  double seconds_to_end = 0;  // from the signal
  std::string log;
};

Outcome signal_after(const std::vector<std::string>& args, const std::string& log, int sig,
                     std::chrono::milliseconds after, const std::vector<std::string>& env = {}) {
  Outcome o;
  o.what = name_of(sig) + " " + std::to_string(after.count()) + " ms after the hold: loom";
  for (const auto& a : args) o.what += " " + a;
  HoldingLoom loom(args, log, env);
  std::this_thread::sleep_for(after);
  const auto sent = Clock::now();
  loom.signal(sig);
  o.sig = sig;
  o.status = loom.wait();
  o.seconds_to_end = std::chrono::duration<double>(Clock::now() - sent).count();
  o.log = read_text(log);
  return o;
}

// Runs each lane (a list of cases) in a thread of its own, the cases of a lane one after another:
// the lanes' processes start side by side, as on a busy host.
std::vector<Outcome> run_lanes(const std::vector<std::vector<std::function<Outcome()>>>& lanes) {
  std::vector<std::vector<Outcome>> results(lanes.size());
  std::vector<std::thread> threads;
  for (size_t l = 0; l < lanes.size(); ++l) {
    threads.emplace_back([&, l] {
      for (const auto& run : lanes[l]) {
        try {
          results[l].push_back(run());
        } catch (const std::exception& e) {
          results[l].push_back(
              {std::string("a case of lane ") + std::to_string(l), 0, -1000, 0, e.what()});
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  std::vector<Outcome> all;
  for (auto& r : results) all.insert(all.end(), r.begin(), r.end());
  return all;
}

// Right at the hold, a few milliseconds on (the loader is still relocating LibTorch), during
// LibTorch's initialisers and the command's own start, and once it waits for the other node.
const std::vector<std::chrono::milliseconds> kMoments = {
    std::chrono::milliseconds(0),   std::chrono::milliseconds(3),   std::chrono::milliseconds(50),
    std::chrono::milliseconds(100), std::chrono::milliseconds(200), std::chrono::milliseconds(500),
    std::chrono::milliseconds(1000)};

// The loader calls the front's .preinit_array, which holds the signals, before the initialiser of
// any library: LibTorch's load after it, from dlopen.
TEST(StartSignals, TheFrontHoldsThemBeforeAnyLibraryStarts) {
  const auto r = run_loom("version", "LD_DEBUG=libs");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // The loader's "calling preinit: FILE" and "calling init: FILE" lines, in order.
  std::vector<std::string> calls;
  std::istringstream lines(r.output);
  for (std::string line; std::getline(lines, line);) {
    const auto at = line.find("calling ");
    if (at != std::string::npos && line.find(": ", at) != std::string::npos) {
      calls.push_back(line.substr(at));
    }
  }
  ASSERT_FALSE(calls.empty()) << r.output;
  EXPECT_EQ(calls.front().rfind("calling preinit: ", 0), 0u)
      << "a library was initialised before the front held the signals: " << calls.front();
  EXPECT_NE(calls.front().find("/loom"), std::string::npos) << calls.front();
  bool torch = false;
  for (const auto& call : calls) torch |= call.find("libtorch_cpu.so") != std::string::npos;
  EXPECT_TRUE(torch) << "LibTorch's initialiser was not seen:\n" << r.output.substr(0, 4000);
}

// Issue 39: on a slow host a launcher signalled while LibTorch loaded died of the signal. Here
// each signal comes at each moment, to a node 0 (which serves the store) or a node 1 (which
// looks for it) waiting for the other node.
TEST(StartSignals, LaunchEndsWith128PlusNAndSaysWhatItWasDoingAtAnyMoment) {
  TempDir dir;
  std::vector<std::vector<std::function<Outcome()>>> lanes;
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) {
    lanes.emplace_back();
    for (size_t m = 0; m < kMoments.size(); ++m) {
      const int node = (m + static_cast<size_t>(sig)) % 2;
      const std::string log = dir / (name_of(sig) + std::to_string(m) + ".log");
      lanes.back().push_back([=] {
        return signal_after(
            {"launch", "--nnodes", "2", "--node-rank", std::to_string(node), "--join-timeout",
             "120", "--master", "127.0.0.1:" + std::to_string(free_port()), "--", "true"},
            log, sig, kMoments[m]);
      });
    }
  }
  for (const Outcome& o : run_lanes(lanes)) {
    EXPECT_EQ(o.status, 128 + o.sig) << o.what << "\n" << o.log;
    EXPECT_NE(o.log.find("loom launch: got " + name_of(o.sig) + " while "), std::string::npos)
        << o.what << "\n"
        << o.log;
    // Node 1 looks for node 0's store in tries of 2 s, and hears the signal between them.
    EXPECT_LT(o.seconds_to_end, 5.0 * kSlowdown) << o.what;
  }
}

// Before training begins a stop signal ends `loom train` at once (nothing to save yet); once it
// trains, SIGTERM commits a checkpoint and exits 75, and SIGINT and SIGHUP still end it at once.
TEST(StartSignals, TrainEndsWith128PlusNWhileStartingAndIsPreemptedOnceTraining) {
  TempDir dir;
  std::vector<std::string> train = {"train"};
  {
    std::istringstream words(tiny_synthetic_args() + " --set train.epochs=200");
    for (std::string w; words >> w;) train.push_back(w);
  }
  std::vector<std::vector<std::function<Outcome()>>> lanes;
  for (auto [sig, ms] : {std::pair{SIGTERM, 0}, {SIGINT, 100}, {SIGHUP, 300}}) {
    const std::string out = dir / name_of(sig);
    lanes.push_back({[=] {
      std::vector<std::string> args = train;
      args.insert(args.end(), {"--out", out});
      return signal_after(args, out + ".log", sig, std::chrono::milliseconds(ms));
    }});
  }
  for (const Outcome& o : run_lanes(lanes)) {
    // Started side by side on a small host, a run may already train by the time its signal comes.
    const bool starting =
        o.log.find("loom train: got " + name_of(o.sig) + " while starting") != std::string::npos;
    if (o.sig == SIGTERM && !starting) {
      EXPECT_EQ(o.status, 75) << o.what << "\n" << o.log;
      EXPECT_NE(o.log.find("preempted (SIGTERM)"), std::string::npos) << o.what << "\n" << o.log;
    } else {
      EXPECT_EQ(o.status, 128 + o.sig) << o.what << "\n" << o.log;
      EXPECT_NE(o.log.find("loom train: got " + name_of(o.sig) + " while "), std::string::npos)
          << o.what << "\n"
          << o.log;
    }
  }
  // Once it trains, SIGHUP ends it at once and says so.
  HoldingLoom training(
      [&] {
        std::vector<std::string> args = train;
        args.insert(args.end(), {"--out", dir / "hup"});
        return args;
      }(),
      dir / "hup.log");
  ASSERT_TRUE(wait_for_text(dir / "hup.log", "step ", 60 * kSlowdown))
      << read_text(dir / "hup.log");
  training.signal(SIGHUP);
  EXPECT_EQ(training.wait(), 128 + SIGHUP) << read_text(dir / "hup.log");
  EXPECT_NE(read_text(dir / "hup.log").find("loom train: got SIGHUP while training; ending now"),
            std::string::npos)
      << read_text(dir / "hup.log");
}

// A parameter server serves until its workers end, also after SIGTERM (their checkpoint needs
// it): one held during start-up is recorded, not fatal. SIGINT and SIGHUP end it with 128 + N.
TEST(StartSignals, PsServerEndsOnSigintAndSighupAndServesOnAfterSigterm) {
  TempDir dir;
  // Rank 1 of 2, the job's one server, looking for a store that never comes.
  const std::vector<std::string> env = {"RANK=1",
                                        "WORLD_SIZE=2",
                                        "LOCAL_RANK=0",
                                        "LOCAL_WORLD_SIZE=1",
                                        "MASTER_ADDR=127.0.0.1",
                                        "MASTER_PORT=" + std::to_string(free_port())};
  const std::vector<std::string> server = {"ps-server", "--set", "parallel.mode=ps", "--set",
                                           "parallel.ps.servers=1"};
  std::vector<std::vector<std::function<Outcome()>>> lanes;
  for (auto [sig, ms] : {std::pair{SIGINT, 0}, {SIGHUP, 200}}) {
    const std::string log = dir / (name_of(sig) + ".log");
    lanes.push_back(
        {[=] { return signal_after(server, log, sig, std::chrono::milliseconds(ms), env); }});
  }
  lanes.emplace_back();
  lanes.back().push_back([&] {
    Outcome o;
    o.what = "SIGTERM at the hold, then SIGINT: loom ps-server";
    HoldingLoom loom(server, dir / "term.log", env);
    loom.signal(SIGTERM);
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    o.status = loom.running() ? 0 : -1;  // 0: still serving
    loom.signal(SIGINT);
    o.sig = SIGINT;
    const int status = loom.wait();
    if (o.status == 0) o.status = status;
    o.log = read_text(dir / "term.log");
    return o;
  });
  for (const Outcome& o : run_lanes(lanes)) {
    EXPECT_EQ(o.status, 128 + o.sig) << o.what << "\n" << o.log;
    EXPECT_NE(o.log.find("loom ps-server: got " + name_of(o.sig) + " while starting; ending now"),
              std::string::npos)
        << o.what << "\n"
        << o.log;
  }
}

// A data worker stops on any of the three, with status 0, before it serves if the signal came
// while it started.
TEST(StartSignals, DataWorkerStopsOnAnyOfThemFromTheStart) {
  TempDir dir;
  const std::string root = dir.path();
  std::vector<std::vector<std::function<Outcome()>>> lanes;
  for (auto [sig, ms] : {std::pair{SIGTERM, 0}, {SIGINT, 50}, {SIGHUP, 200}}) {
    const std::string log = dir / (name_of(sig) + ".log");
    lanes.push_back({[=] {
      return signal_after({"data-worker", "--listen", "127.0.0.1:0", "--data-root", root}, log, sig,
                          std::chrono::milliseconds(ms));
    }});
  }
  for (const Outcome& o : run_lanes(lanes)) {
    EXPECT_EQ(o.status, 0) << o.what << "\n" << o.log;
    const bool said =
        o.log.find("got " + name_of(o.sig) + " while starting; stopping") != std::string::npos ||
        o.log.find("stopping on " + name_of(o.sig)) != std::string::npos;
    EXPECT_TRUE(said) << o.what << "\n" << o.log;
  }
  HoldingLoom serving({"data-worker", "--listen", "127.0.0.1:0", "--data-root", dir.path()},
                      dir / "serving.log");
  ASSERT_TRUE(wait_for_text(dir / "serving.log", "listening on", 30 * kSlowdown));
  serving.signal(SIGHUP);
  EXPECT_EQ(serving.wait(), 0) << read_text(dir / "serving.log");
  EXPECT_NE(read_text(dir / "serving.log").find("loom data-worker: stopping on SIGHUP"),
            std::string::npos)
      << read_text(dir / "serving.log");
}

}  // namespace
}  // namespace loom::test
