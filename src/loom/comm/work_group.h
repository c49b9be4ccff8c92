// One Work standing for several: an operation made of many sends and receives (a parameter
// server's parts of one gradient bucket) is waited for, and timed, as one.
#pragma once

#include <vector>

#include "loom/comm/work.h"

namespace loom::comm {

// Waits for `work`; an error or timeout is rethrown with `what` in front, keeping its type
// (TimeoutError, else CommError): "ps totals of server 1 (rank 3): recv #9 ...: ...".
void wait_named(const WorkPtr& work, const std::string& what, std::chrono::milliseconds timeout);

class WorkGroup : public Work {
 public:
  // `what` prefixes every member's error: "ps bucket 3: recv #9 (1024 x float) from rank 4: ...".
  WorkGroup(std::string what, std::vector<WorkPtr> members);

  // Waits for every member in order, each within `timeout` of the call; the first error (or
  // timeout) is rethrown with this group's name in front, keeping its type.
  void wait(std::chrono::milliseconds timeout) override;
  bool completed() const override;
  // The last member's finish.
  std::chrono::steady_clock::time_point finished_at() const override;

 private:
  std::vector<WorkPtr> members_;
};

}  // namespace loom::comm
