// Waits for each worker's next request to a parameter server on a thread of its own, and tells
// the server's loop which requests have arrived. Why threads: a Work is waited for one at a
// time (there is no wait-for-any, and polling completed() would spin), and a server that holds
// the parameters must answer whichever worker asks first. Only the waiting happens on these
// threads; the server's thread posts every receive and reads every message.
//
// A request not there within the timeout is reported as that worker's error. The destructor joins
// the threads: one still waiting for a live worker's request returns when it arrives, or at the
// timeout.
#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "loom/comm/work.h"

namespace loom::parallel::ps {

class RequestWaiters {
 public:
  RequestWaiters(int workers, std::chrono::milliseconds timeout);
  ~RequestWaiters();
  RequestWaiters(const RequestWaiters&) = delete;
  RequestWaiters& operator=(const RequestWaiters&) = delete;

  // Waits for `request`, the receive of worker `worker`'s next request.
  void watch(int worker, comm::WorkPtr request);
  // Blocks until at least one watched request has arrived or failed; returns those workers with
  // their errors (null when it arrived). Throws Error when nothing is being waited for.
  std::vector<std::pair<int, std::exception_ptr>> next();

 private:
  struct Slot {
    comm::WorkPtr request;  // posted, not yet taken by its thread
    bool waiting = false;   // its thread waits on it
    bool done = false;
    std::exception_ptr error;
  };
  void wait_loop(int worker);

  const std::chrono::milliseconds timeout_;
  std::mutex mutex_;
  std::condition_variable posted_, arrived_;
  std::vector<Slot> slots_;
  bool quit_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace loom::parallel::ps
