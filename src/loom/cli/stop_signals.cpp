#include "loom/cli/stop_signals.h"

#include <unistd.h>

#include <atomic>
#include <cstring>

#include "loom/core/settings.h"

namespace loom::cli {
namespace {

sigset_t start_mask;  // set by main() before any other thread of ours starts

// Read by the handler, hence atomics of pointers to string literals.
std::atomic<const char*> command_name{"loom"};
std::atomic<const char*> activity_name{"starting"};
// A rank that `loom launch` started ends on SIGINT without a word: the launcher sends it to stop
// the job's other ranks after one failed (or passes on the user's), and says why itself.
std::atomic<bool> quiet_on_sigint{false};
static_assert(std::atomic<const char*>::is_always_lock_free);

// Appends `text` to `out` (of `size`), as far as it fits; async-signal-safe.
void append(char* out, size_t size, size_t& at, const char* text) {
  while (*text && at + 1 < size) out[at++] = *text++;
}

// Runs in whichever thread the signal lands on; only async-signal-safe calls.
void end_now(int sig) {
  if (sig == SIGINT && quiet_on_sigint.load()) ::_exit(128 + sig);
  const char* name = sig == SIGTERM ? "SIGTERM" : sig == SIGINT ? "SIGINT" : "SIGHUP";
  char message[256];
  size_t at = 0;
  append(message, sizeof message, at, "loom ");
  append(message, sizeof message, at, command_name.load());
  append(message, sizeof message, at, ": got ");
  append(message, sizeof message, at, name);
  append(message, sizeof message, at, " while ");
  append(message, sizeof message, at, activity_name.load());
  append(message, sizeof message, at, "; ending now\n");
  (void)!::write(STDERR_FILENO, message, at);
  ::_exit(128 + sig);
}

}  // namespace

sigset_t stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) sigaddset(&set, sig);
  return set;
}

void set_start_signal_mask(const sigset_t& mask) { start_mask = mask; }

const sigset_t& start_signal_mask() { return start_mask; }

void end_on_stop_signals(const char* command) {
  command_name.store(command);
  quiet_on_sigint.store(!setting("LOOM_LAUNCH_ID").empty());
  struct sigaction action {};
  action.sa_handler = end_now;
  action.sa_mask = stop_signals();  // one message, even when several arrive at once
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) {
    struct sigaction inherited {};
    ::sigaction(sig, nullptr, &inherited);
    if (inherited.sa_handler == SIG_IGN) continue;  // nohup's SIGHUP stays ignored
    ::sigaction(sig, &action, nullptr);
  }
}

void set_stop_activity(const char* activity) { activity_name.store(activity); }

void release_stop_signals() {
  sigset_t release;
  sigemptyset(&release);
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) {
    if (!sigismember(&start_mask, sig)) sigaddset(&release, sig);
  }
  ::pthread_sigmask(SIG_UNBLOCK, &release, nullptr);
}

int take_stop_signal() {
  const sigset_t stop = stop_signals();
  siginfo_t info;
  const timespec now{0, 0};
  const int sig = ::sigtimedwait(&stop, &info, &now);
  return sig > 0 ? sig : 0;
}

std::string signal_name(int sig) { return std::string("SIG") + sigabbrev_np(sig); }

}  // namespace loom::cli
