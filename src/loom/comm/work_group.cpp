#include "loom/comm/work_group.h"

#include <algorithm>

#include "loom/core/error.h"

namespace loom::comm {

void wait_named(const WorkPtr& work, const std::string& what, std::chrono::milliseconds timeout) {
  try {
    work->wait(timeout);
  } catch (const TimeoutError& e) {
    throw TimeoutError(what + ": " + e.what());
  } catch (const std::exception& e) {
    throw CommError(what + ": " + e.what());
  }
}

WorkGroup::WorkGroup(std::string what, std::vector<WorkPtr> members)
    : Work(std::move(what)), members_(std::move(members)) {}

void WorkGroup::wait(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (const WorkPtr& member : members_) {
    const auto left = std::max(std::chrono::milliseconds(1),
                               std::chrono::duration_cast<std::chrono::milliseconds>(
                                   deadline - std::chrono::steady_clock::now()));
    wait_named(member, what(), left);
  }
  if (!Work::completed()) finish();
}

bool WorkGroup::completed() const {
  return std::all_of(members_.begin(), members_.end(),
                     [](const WorkPtr& member) { return member->completed(); });
}

std::chrono::steady_clock::time_point WorkGroup::finished_at() const {
  std::chrono::steady_clock::time_point last{};
  for (const WorkPtr& member : members_) last = std::max(last, member->finished_at());
  return last;
}

}  // namespace loom::comm
