// Between two ranks, messages arrive in the order they are sent (the Communicator pairs sends
// and receives in call order per peer). Schedules of compute actions get their receives in that
// order, whatever order the ranks compute in; a schedule written with its receives in another
// order is refused, naming both actions.
#include <gtest/gtest.h>

#include "dist/random_schedule.h"
#include "loom/core/error.h"
#include "loom/parallel/pipeline/schedule_csv.h"
#include "loom/parallel/pipeline/validator.h"
#include "tools/test_support.h"

namespace loom::parallel::pipeline {
namespace {

std::string error_of(const Schedule& s) {
  try {
    validate(s);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

Schedule fixture(const std::string& name) {
  const std::string path = test::source_dir() + "/tests/dist/schedules/" + name;
  return schedule_from_csv(test::read_text(path), name);
}

// Issue 39's file: looped placement on 2 ranks, so each link carries activations one way and
// gradients the other, and zero-bubble's order sends stage 2's gradient of micro-batch 0 before
// stage 0's activations of micro-batch 2, which rank 1 needs first.
TEST(PipelineLinkOrder, TorchZeroBubbleFilesReceiveInSendingOrder) {
  for (const std::string name :
       {"zb_interleaved_2x2_m8.csv", "zb_interleaved_2x2_m8_iw.csv", "zb_interleaved_3x2_m6.csv"}) {
    const Schedule s = fixture(name);
    EXPECT_EQ(s.stage_rank, looped_stage_ranks(s.ranks, s.stages)) << name;
    EXPECT_TRUE(s.splits_backward()) << name;
    EXPECT_EQ(error_of(s), "") << name;
  }
  const Schedule s = fixture("zb_interleaved_2x2_m8.csv");
  EXPECT_EQ(s.ranks, 2);
  EXPECT_EQ(s.stages, 4);
  EXPECT_EQ(s.microbatches, 8);
  EXPECT_NE(s.describe_rank(1).find("1RECV_B0 1RECV_F2 1F2 1SEND_F2 1I0 1SEND_B0"),
            std::string::npos)
      << s.describe_rank(1);
}

// Communication as add_communication laid it out before issue 39: every receive right before
// the computation that needs it, every send right after the one that produced it.
Schedule with_naive_communication(Schedule s) {
  const auto remote = [&](int rank, int stage) {
    return stage >= 0 && stage < s.stages && s.stage_rank[static_cast<size_t>(stage)] != rank;
  };
  for (int r = 0; r < s.ranks; ++r) {
    std::vector<Action> list;
    for (const Action& a : s.actions[static_cast<size_t>(r)]) {
      if (a.is_communication()) continue;
      const bool forward = a.kind == ActionKind::kForward;
      const bool gradient = a.kind == ActionKind::kBackward || a.kind == ActionKind::kBackwardInput;
      if (forward && remote(r, a.stage - 1))
        list.push_back({a.stage, ActionKind::kRecvForward, a.microbatch});
      if (gradient && remote(r, a.stage + 1))
        list.push_back({a.stage, ActionKind::kRecvBackward, a.microbatch});
      list.push_back(a);
      if (forward && remote(r, a.stage + 1))
        list.push_back({a.stage, ActionKind::kSendForward, a.microbatch});
      if (gradient && remote(r, a.stage - 1))
        list.push_back({a.stage, ActionKind::kSendBackward, a.microbatch});
    }
    s.actions[static_cast<size_t>(r)] = list;
  }
  return s;
}

// That layout of issue 39's file put a tensor on the wrong action (rank 1 took stage 2's
// gradient as stage 0's activations): it is refused now, naming both actions.
TEST(PipelineLinkOrder, TheOldLayoutOfTheTorchFileIsRefused) {
  const Schedule old = with_naive_communication(fixture("zb_interleaved_2x2_m8.csv"));
  const std::string why = error_of(old);
  EXPECT_NE(why.find("(1RECV_F2): receives from rank 0 out of order: rank 0 sends 2SEND_B0"),
            std::string::npos)
      << why;
}

// Receives out of the order of the sends are refused at the first that would take another
// action's message.
TEST(PipelineLinkOrder, ReceivesOutOfSendingOrderAreRefused) {
  const Schedule swapped = schedule_from_csv(
      "0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1\n"
      "1RECV_F1,1F1,1RECV_F0,1F0,1B0,1SEND_B0,1B1,1SEND_B1\n",
      "swapped.csv");
  EXPECT_EQ(error_of(swapped),
            "pipeline schedule 'swapped.csv': rank 1, action 0 (1RECV_F1): receives from rank 0 "
            "out of order: rank 0 sends 0SEND_F0 (its action 1) before 0SEND_F1, and messages "
            "between two ranks arrive in the order they are sent");
  // The same computations as a compute-only file: the receives follow rank 0's order.
  const Schedule fixed = schedule_from_csv("0F0,0F1,0B0,0B1\n1F1,1F0,1B0,1B1\n", "fixed.csv");
  EXPECT_EQ(fixed.describe_rank(1), "1RECV_F0 1RECV_F1 1F1 1F0 1B0 1SEND_B0 1B1 1SEND_B1");
  EXPECT_EQ(error_of(fixed), "");
}

// Any order of the computations that respects their dependencies validates once its
// communication is added: no deadlock, every link in order.
TEST(PipelineLinkOrder, EveryRandomValidOrderValidates) {
  int schedules = 0;
  for (int ranks : {2, 3, 4}) {
    for (int chunks : {1, 2, 3}) {
      for (bool split : {false, true}) {
        for (uint64_t seed = 0; seed < 40; ++seed) {
          test::RandomScheduleOptions o;
          o.ranks = ranks;
          o.chunks = chunks;
          o.microbatches = 1 + static_cast<int>(seed % 6);
          o.split_backward = split;
          const Schedule s = test::random_schedule(seed, o);
          ASSERT_EQ(error_of(s), "") << "seed " << seed << " P=" << ranks << " chunks=" << chunks
                                     << " split=" << split << "\n"
                                     << schedule_to_csv(s);
          ++schedules;
        }
      }
    }
  }
  EXPECT_EQ(schedules, 720);
}

}  // namespace
}  // namespace loom::parallel::pipeline
