// SerialExecutor: operations run in order, on its thread or on a caller that waits for one nobody
// has started; the shortcut for operations that cannot block runs on the caller's thread when
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

TEST(SerialExecutor, ACallerThatWaitsAtOnceRunsTheOperationItselfWithinItsGrace) {
  // A grace longer than the test: the executor's thread cannot take the operation first.
  SerialExecutor executor(std::chrono::hours(1));
  for (int i = 0; i < 20; ++i) {
    std::thread::id ran_on;
    executor.submit("waited", [&] { ran_on = std::this_thread::get_id(); })->wait(kWait);
    EXPECT_EQ(ran_on, std::this_thread::get_id()) << "operation " << i;
  }
}

TEST(SerialExecutor, AnOperationNobodyWaitsForStartsOnItsThreadAfterTheGrace) {
  SerialExecutor executor(std::chrono::milliseconds(1));
  std::promise<std::thread::id> ran_on;
  WorkPtr work = executor.submit("unwaited", [&] { ran_on.set_value(std::this_thread::get_id()); });
  auto ran = ran_on.get_future();
  ASSERT_EQ(ran.wait_for(kWait), std::future_status::ready);
  EXPECT_NE(ran.get(), std::this_thread::get_id());
  work->wait(kWait);
  EXPECT_TRUE(work->completed());
}

TEST(SerialExecutor, StoppingRunsWhatIsStillInItsGrace) {
  bool ran = false;
  {
    SerialExecutor executor(std::chrono::milliseconds(50));
    executor.submit("left behind", [&] { ran = true; });
  }
  EXPECT_TRUE(ran);
}

}  // namespace
}  // namespace loom::comm
