#include "loom/train/stall_watchdog.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "loom/comm/store_text.h"
#include "loom/core/log.h"
#include "loom/core/thread_stacks.h"
#include "loom/core/topology.h"

namespace loom::train {
namespace {

using Clock = std::chrono::steady_clock;

// A heartbeat goes out when the step or phase changed (the thread looks every 100 ms), and at
// least this often otherwise.
constexpr auto kBeatAtLeast = std::chrono::seconds(1);
// A rank not heard from for this long, two and a half beats, is silent (stopped, hung in the
// kernel, or gone).
constexpr int64_t kSilentAfterMs = 2500;

int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string seconds_text(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f s", seconds);
  return text;
}

}  // namespace

std::string heartbeat_key(int rank) { return "loom/heartbeat/" + std::to_string(rank); }
std::string stall_key(int rank) { return "loom/stall/" + std::to_string(rank); }

bool parse_heartbeat(const std::string& text, Heartbeat& out) {
  std::istringstream in(text);
  Heartbeat h;
  if (!(in >> h.step >> h.phase >> h.unix_ms >> h.resumed_from >> h.pid >> h.host)) return false;
  out = h;
  return true;
}

StallWatchdog::StallWatchdog(StallWatchdogOptions options) : options_(std::move(options)) {
  thread_ = std::thread([this] { run(); });
}

StallWatchdog::~StallWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void StallWatchdog::exit_after(double seconds, std::string what) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (deadline_set_) return;
  deadline_set_ = true;
  deadline_ = Clock::now() +
              std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  deadline_what_ = std::move(what);
}

void StallWatchdog::run() {
  publish_heartbeat(true);
  uint64_t seen = beats_.load();
  auto last_progress = Clock::now();
  const auto timeout = std::chrono::duration<double>(options_.stall_timeout_s);
  std::unique_lock<std::mutex> lock(mutex_);
  while (!wake_.wait_for(lock, std::chrono::milliseconds(100), [this] { return stopping_; })) {
    const auto now = Clock::now();
    if (const uint64_t beats = beats_.load(); beats != seen) {
      seen = beats;
      last_progress = now;
    }
    if (!deadline_set_ && options_.termination && options_.termination->load() != 0) {
      lock.unlock();
      exit_after(options_.preempt_grace_s,
                 "rank " + std::to_string(options_.rank) +
                     " did not commit its checkpoint and stop within train.preempt_grace_s = " +
                     seconds_text(options_.preempt_grace_s) + " of SIGTERM");
      lock.lock();
    }
    if (deadline_set_ && now > deadline_) {
      const std::string what = deadline_what_;
      lock.unlock();
      report_and_exit(what);
    }
    if (options_.stall_timeout_s > 0 && now - last_progress > timeout) {
      lock.unlock();
      report_and_exit("rank " + std::to_string(options_.rank) + " made no progress for " +
                      seconds_text(options_.stall_timeout_s) + " (train.stall_timeout_s)");
    }
    lock.unlock();
    publish_heartbeat(false);
    lock.lock();
  }
}

void StallWatchdog::publish_heartbeat(bool force) {
  if (!options_.store || store_failed_) return;
  const int phase = phase_.load();
  const std::string state =
      std::to_string(step_.load()) + " " +
      (phase < 0 ? std::string("starting") : phase_name(static_cast<Phase>(phase)));
  const auto now = Clock::now();
  const bool due = now - last_published_ >= kBeatAtLeast || state != last_heartbeat_;
  if (!force && !due) return;
  const std::string beat = state + " " + std::to_string(unix_ms()) + " " +
                           std::to_string(resumed_from_.load()) + " " + std::to_string(::getpid()) +
                           " " + host_name();
  try {
    comm::set_text(*options_.store, heartbeat_key(options_.rank), beat);
    last_heartbeat_ = state;
    last_published_ = now;
  } catch (const std::exception& e) {
    // The store went away with its launcher: nothing to tell, and the job is ending anyway.
    store_failed_ = true;
    LOOM_LOG(kWarn, "watchdog") << "rank " << options_.rank
                                << ": heartbeats stopped, the store is gone: " << e.what();
  }
}

std::string StallWatchdog::where() const {
  const int phase = phase_.load();
  if (phase < 0) return "before its first step";
  const auto p = static_cast<Phase>(phase);
  std::string text =
      "in " + std::string(phase_name(p)) + " of step " + std::to_string(step_.load());
  switch (p) {
    case Phase::kDataWait:
      text += ", waiting for batch " + std::to_string(batch_index_.load() + 1) + " of epoch " +
              std::to_string(batch_epoch_.load() + 1) + " from " + options_.data_source;
      break;
    case Phase::kCommExposed:
    case Phase::kBubble:
      text += ", waiting for " + options_.exchange;
      break;
    case Phase::kTensorComm:
      text += ", waiting for its tensor group's all-reduce";
      break;
    default:
      break;
  }
  return text;
}

std::string StallWatchdog::describe_peers() {
  if (!options_.store || store_failed_ || options_.world < 2) return "";
  const int64_t now = unix_ms();
  std::string silent, behind, others;
  for (int r = 0; r < options_.world; ++r) {
    if (r == options_.rank) continue;
    Heartbeat h;
    try {
      const auto beat = comm::text_if_set(*options_.store, heartbeat_key(r));
      if (!beat) {
        silent += "; rank " + std::to_string(r) + ": never heard from";
        continue;
      }
      if (!parse_heartbeat(*beat, h)) continue;
    } catch (const std::exception& e) {
      return "; the store could not be read: " + std::string(e.what());
    }
    const std::string who = "rank " + std::to_string(r) + " (pid " + std::to_string(h.pid) +
                            " on " + h.host + ", step " + std::to_string(h.step) + " in " + h.phase;
    const int64_t age = now - h.unix_ms;
    if (age > kSilentAfterMs) {
      silent += "; " + who + ", silent for " + seconds_text(age / 1e3) + ")";
    } else if (h.step < step_.load()) {
      behind += "; " + who + ", behind)";
    } else {
      others += "; " + who + ")";
    }
  }
  if (!silent.empty()) return "; not heard from" + silent.substr(1) + behind + others;
  if (!behind.empty()) return "; behind" + behind.substr(1) + others;
  return others.empty() ? "" : "; the others" + others.substr(1);
}

void StallWatchdog::report_and_exit(const std::string& headline) {
  const std::string report = headline + ", " + where() + describe_peers();
  LOOM_LOG(kError, "watchdog") << report;
  if (options_.store && !store_failed_) {
    try {
      comm::set_text(*options_.store, stall_key(options_.rank), report);
    } catch (const std::exception&) {
      // The launcher will only see the exit status; the log has the report.
    }
  }
  LOOM_LOG(kError, "watchdog") << "rank " << options_.rank << ": every thread's stack:\n"
                               << all_thread_stacks();
  std::fflush(nullptr);
  std::_Exit(1);
}

}  // namespace loom::train
