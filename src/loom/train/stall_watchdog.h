// The stall watchdog: a thread beside the training loop that notices when a rank stops making
// progress, says where it stands and on whom it waits, writes every thread's stack to the log
// and ends the process with status 1, instead of leaving a job hung until someone looks.
//
// Progress is any phase boundary of a step, an evaluation batch or a checkpoint file. Through
// the job's store every rank also publishes a heartbeat (its step and phase, a few times a
// second, from this thread), so that a rank which stalls can name the ranks it has stopped
// hearing from: a rank that was SIGSTOPped, hangs in the kernel or lost its host is silent,
// while one stuck in a collective keeps beating at an old step. The report also goes to the
// store ("loom/stall/<rank>"), where `loom launch` reads it to name the culprit, and the
// heartbeats tell the launcher how far a failed attempt got.
//
// It also keeps preemption's promise: once asked (exit_after), it ends the process with status 1
// if training has not finished by the deadline.
//
// Threading: begin_step(), enter(), waiting_for_batch(), progress() and set_resumed_from() are
// called from the training thread (they only store atomics); the watchdog's own thread does the
// rest.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "loom/core/step_phase.h"

namespace loom::train {

struct StallWatchdogOptions {
  double stall_timeout_s = 0;  // train.stall_timeout_s; 0: no stall detection
  int rank = 0, world = 1;
  std::string data_source;  // what a data_wait waits on, e.g. "the local loader (2 threads)"
  std::string exchange;     // what the gradient exchange waits on, e.g. "all-reduce over shm"
  // The job's store, on a connection of the watchdog's own with a short timeout; null for a
  // process on its own (no heartbeats, no peers to name).
  c10::intrusive_ptr<c10d::Store> store;
  // SIGTERM's flag, when the process catches it: once set, the process has preempt_grace_s to
  // end (see exit_after), even if the training thread never gets to see it.
  const std::atomic<int>* termination = nullptr;
  double preempt_grace_s = 30;
};

// A rank's heartbeat as published: "<step> <phase> <unix ms> <resumed from step> <pid> <host>".
struct Heartbeat {
  int64_t step = 0;
  std::string phase;
  int64_t unix_ms = 0;
  int64_t resumed_from = -1;
  int64_t pid = 0;
  std::string host;
};
std::string heartbeat_key(int rank);
std::string stall_key(int rank);
// False for text that is not a heartbeat.
bool parse_heartbeat(const std::string& text, Heartbeat& out);

class StallWatchdog {
 public:
  explicit StallWatchdog(StallWatchdogOptions options);
  ~StallWatchdog();
  StallWatchdog(const StallWatchdog&) = delete;
  StallWatchdog& operator=(const StallWatchdog&) = delete;

  // Optimizer step `step` (1-based: the step now being run) begins.
  void begin_step(int64_t step) {
    step_.store(step, std::memory_order_relaxed);
    beats_.fetch_add(1, std::memory_order_relaxed);
  }
  // A phase of that step begins.
  void enter(Phase phase) {
    phase_.store(static_cast<int>(phase), std::memory_order_relaxed);
    beats_.fetch_add(1, std::memory_order_relaxed);
  }
  // The batch the next data_wait is for (its epoch, and index within the epoch; 0-based).
  void waiting_for_batch(int64_t epoch, int64_t index) {
    batch_epoch_.store(epoch, std::memory_order_relaxed);
    batch_index_.store(index, std::memory_order_relaxed);
  }
  // Any other sign of life: an evaluation batch, a checkpoint file written.
  void progress() { beats_.fetch_add(1, std::memory_order_relaxed); }
  void set_resumed_from(int64_t step) { resumed_from_.store(step, std::memory_order_relaxed); }
  // From now on the process must end within `seconds`; past that, `what` is reported as above
  // and the process exits 1. Only the first call counts.
  void exit_after(double seconds, std::string what);

 private:
  void run();
  void publish_heartbeat(bool force);
  std::string where() const;  // this rank's phase and what it waits for
  std::string describe_peers();
  [[noreturn]] void report_and_exit(const std::string& headline);

  const StallWatchdogOptions options_;
  std::atomic<uint64_t> beats_{0};
  std::atomic<int> phase_{-1};  // -1: before the first step
  std::atomic<int64_t> step_{0}, batch_epoch_{-1}, batch_index_{-1}, resumed_from_{-1};

  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  bool deadline_set_ = false;
  std::chrono::steady_clock::time_point deadline_;
  std::string deadline_what_;
  std::string last_heartbeat_;
  std::chrono::steady_clock::time_point last_published_{};
  bool store_failed_ = false;
  std::thread thread_;
};

}  // namespace loom::train
