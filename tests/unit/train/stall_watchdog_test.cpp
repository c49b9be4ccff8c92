// The stall watchdog: a rank that stops making progress says where it is and on whom it waits,
// and exits 1; one that progresses is left alone; a preempted rank past its grace is ended.
#include "loom/train/stall_watchdog.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "loom/comm/store_server.h"
#include "loom/comm/tcp_store.h"

namespace loom::train {
namespace {

using std::chrono::milliseconds;

std::vector<uint8_t> bytes_of(const std::string& text) { return {text.begin(), text.end()}; }

int64_t unix_ms_ago(int64_t ms) {
  return std::chrono::duration_cast<milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
             .count() -
         ms;
}

class StallWatchdogDeath : public testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST_F(StallWatchdogDeath, AStalledRankSaysWhereItIsAndExitsOne) {
  EXPECT_EXIT(
      {
        StallWatchdogOptions options;
        options.stall_timeout_s = 0.3;
        options.rank = 2;
        options.world = 4;
        options.data_source = "the local loader (3 threads)";
        StallWatchdog watchdog(options);
        watchdog.begin_step(7);
        watchdog.waiting_for_batch(1, 41);
        watchdog.enter(Phase::kDataWait);
        std::this_thread::sleep_for(std::chrono::seconds(10));
        std::exit(0);
      },
      testing::ExitedWithCode(1),
      "rank 2 made no progress for 0.3 s \\(train.stall_timeout_s\\), in data_wait of step 7, "
      "waiting for batch 42 of epoch 2 from the local loader \\(3 threads\\)"
      "(.|\n)*every thread's stack(.|\n)*thread [0-9]+ \\(");
}

// Through the store it names the rank it stopped hearing from (a SIGSTOPped one, say), and
// leaves its report there for the launcher.
TEST_F(StallWatchdogDeath, NamesTheRankThatWentSilent) {
  EXPECT_EXIT(
      {
        comm::StoreServer server("127.0.0.1", 0);
        auto store =
            c10::make_intrusive<comm::TcpStore>("127.0.0.1", server.port(), milliseconds(5000));
        store->set(heartbeat_key(1),
                   bytes_of("5 backward " + std::to_string(unix_ms_ago(60'000)) + " 0 4242 hostB"));
        store->set(heartbeat_key(2),
                   bytes_of("6 comm_exposed " + std::to_string(unix_ms_ago(0)) + " 0 77 hostC"));
        StallWatchdogOptions options;
        options.stall_timeout_s = 0.5;
        options.rank = 0;
        options.world = 3;
        options.exchange = "all-reduce over shm";
        options.store =
            c10::make_intrusive<comm::TcpStore>("127.0.0.1", server.port(), milliseconds(5000));
        {
          StallWatchdog watchdog(options);
          watchdog.begin_step(6);
          watchdog.enter(Phase::kCommExposed);
          std::this_thread::sleep_for(std::chrono::seconds(10));
        }
        std::exit(0);
      },
      testing::ExitedWithCode(1),
      "in comm_exposed of step 6, waiting for all-reduce over shm; not heard from rank 1 \\(pid "
      "4242 on hostB, step 5 in backward, silent for [0-9.]+ s\\); rank 2 \\(pid 77 on hostC, "
      "step 6 in comm_exposed\\)");
}

TEST(StallWatchdog, ARankThatProgressesIsLeftAloneAndBeats) {
  comm::StoreServer server("127.0.0.1", 0);
  auto store = c10::make_intrusive<comm::TcpStore>("127.0.0.1", server.port(), milliseconds(5000));
  StallWatchdogOptions options;
  options.stall_timeout_s = 0.5;
  options.rank = 1;
  options.world = 2;
  options.store =
      c10::make_intrusive<comm::TcpStore>("127.0.0.1", server.port(), milliseconds(5000));
  StallWatchdog watchdog(options);
  watchdog.set_resumed_from(40);
  for (int step = 41; step <= 60; ++step) {  // 1 s of steps, each well inside the timeout
    watchdog.begin_step(step);
    watchdog.enter(Phase::kForward);
    std::this_thread::sleep_for(milliseconds(50));
  }
  // Still alive, until the heartbeat of the last step is out (the thread looks every 100 ms).
  Heartbeat beat;
  for (int wait = 0; wait < 100 && beat.step != 60; ++wait) {
    watchdog.progress();
    std::this_thread::sleep_for(milliseconds(50));
    const auto value = store->get(heartbeat_key(1));
    ASSERT_TRUE(parse_heartbeat(std::string(value.begin(), value.end()), beat));
  }
  EXPECT_EQ(beat.step, 60);
  EXPECT_EQ(beat.phase, "forward");
  EXPECT_EQ(beat.resumed_from, 40);
  EXPECT_EQ(beat.pid, ::getpid());
  EXPECT_LT(std::abs(beat.unix_ms - unix_ms_ago(0)), 2000);
}

TEST_F(StallWatchdogDeath, APreemptedRankPastItsGraceIsEnded) {
  EXPECT_EXIT(
      {
        std::atomic<int> termination{15};  // as catch_termination() sets it on SIGTERM
        StallWatchdogOptions options;
        options.termination = &termination;
        options.preempt_grace_s = 0.3;
        StallWatchdog watchdog(options);
        watchdog.begin_step(3);
        watchdog.enter(Phase::kBackward);
        for (int i = 0; i < 100; ++i) {  // progressing, but never done
          watchdog.progress();
          std::this_thread::sleep_for(milliseconds(50));
        }
        std::exit(0);
      },
      testing::ExitedWithCode(1),
      "rank 0 did not commit its checkpoint and stop within train.preempt_grace_s = 0.3 s of "
      "SIGTERM, in backward of step 3");
}

}  // namespace
}  // namespace loom::train
