// A thread that runs submitted operations one at a time, in submission order, each finishing
// its Work. The shm backend runs collectives on one and point-to-point traffic on one per peer
// and direction, so a send waiting for its receiver never blocks a receive from that receiver.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "loom/comm/work.h"

namespace loom::comm {

class SerialExecutor {
 public:
  SerialExecutor();
  // Runs what was submitted, then stops the thread.
  ~SerialExecutor();
  SerialExecutor(const SerialExecutor&) = delete;
  SerialExecutor& operator=(const SerialExecutor&) = delete;

  // `body` runs on the executor's thread; its exception, if any, becomes the Work's error.
  WorkPtr submit(std::string what, std::function<void()> body);

 private:
  void run();

  std::mutex mutex_;
  std::condition_variable queue_cv_;
  std::deque<std::pair<WorkPtr, std::function<void()>>> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace loom::comm
