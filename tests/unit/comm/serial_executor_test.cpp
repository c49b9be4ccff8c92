// SerialExecutor's shortcut for operations that cannot block: run on the caller's thread when
// the executor is idle and the operation is ready, never past queued work.
#include "loom/comm/serial_executor.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <stdexcept>
#include <thread>

namespace loom::comm {
namespace {

constexpr std::chrono::milliseconds kWait{10000};

TEST(SerialExecutor, AReadyOperationRunsAtOnceOnTheCallersThreadWhenIdle) {
  SerialExecutor executor;
  std::thread::id ran_on;
  WorkPtr work = executor.run_now_if_idle(
      "inline", [] { return true; }, [&] { ran_on = std::this_thread::get_id(); });
  ASSERT_NE(work, nullptr);
  EXPECT_TRUE(work->completed());
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  work->wait(kWait);

  bool ran = false;
  EXPECT_EQ(executor.run_now_if_idle(
                "not ready", [] { return false; }, [&] { ran = true; }),
            nullptr);
  EXPECT_FALSE(ran);
}

TEST(SerialExecutor, NothingOvertakesQueuedWorkAndErrorsReachTheWork) {
  SerialExecutor executor;
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<int> order{0};
  int first = -1, second = -1;
  WorkPtr blocked = executor.submit("blocked", [&] {
    released.wait();
    first = order++;
  });
  bool ran = false;
  // The executor is busy (or has queued work): the shortcut declines.
  EXPECT_EQ(executor.run_now_if_idle(
                "behind", [] { return true; }, [&] { ran = true; }),
            nullptr);
  EXPECT_FALSE(ran);
  WorkPtr queued = executor.submit("queued", [&] { second = order++; });
  release.set_value();
  blocked->wait(kWait);
  queued->wait(kWait);
  EXPECT_EQ(first, 0);
  EXPECT_EQ(second, 1);

  WorkPtr failed = executor.run_now_if_idle(
      "failing", [] { return true; }, [] { throw std::runtime_error("mailbox gone"); });
  ASSERT_NE(failed, nullptr);
  EXPECT_THROW(failed->wait(kWait), std::runtime_error);
  // The executor still runs what comes next.
  bool later = false;
  executor.submit("later", [&] { later = true; })->wait(kWait);
  EXPECT_TRUE(later);
}

}  // namespace
}  // namespace loom::comm
