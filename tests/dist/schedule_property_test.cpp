// Every schedule that validates runs right. Random valid schedules (any order of the
// computations that respects what each needs, dist/random_schedule.h) on 2 and 3 ranks, with 1
// or 2 stages per rank, with and without split backward, and torch.distributed.pipelining's
// compute-only files (looped placement, split backward, dist/schedules/) each train a small GPT
// and a small CNN for one step like one process: the loss and every gradient within a relative
// 1e-5. And a message that reaches the wrong action is an error naming what was expected and
// what arrived, not a silent wrong gradient.
#include <gtest/gtest.h>

#include "tools/test_support.h"

namespace loom::test {
namespace {

CommandResult launch(int ranks, const std::string& cases) {
  return run_loom("launch --nproc-per-node " + std::to_string(ranks) + " --grace 5 -- " +
                  test::schedule_property_worker() + " shm " + cases);
}

// `count` cases from `first_seed` on, cycling through 1 and 2 stages per rank and B or I + W,
// with 2..5 micro-batches (a random order needs no particular count).
std::string random_cases(int first_seed, int count) {
  std::string cases;
  for (int seed = first_seed; seed < first_seed + count; ++seed) {
    const int chunks = 1 + seed % 2;
    const char* backward = (seed / 2) % 2 ? "split" : "full";
    cases += " random:" + std::to_string(seed) + ":" + std::to_string(chunks) + ":" +
             std::to_string(2 + seed % 4) + ":" + backward;
  }
  return cases;
}

void expect_every_case_right(int ranks, const std::string& cases, int count) {
  const CommandResult r = launch(ranks, cases);
  EXPECT_EQ(r.exit_code, 0) << cases << "\n" << r.output;
  for (int rank = 0; rank < ranks; ++rank) {
    const std::string all = std::to_string(2 * count);
    EXPECT_NE(r.output.find("rank " + std::to_string(rank) + ": " + all + " of " + all),
              std::string::npos)
        << r.output;
  }
}

TEST(ScheduleProperty, RandomValidSchedulesOnTwoRanksTrainLikeOneProcess) {
  expect_every_case_right(2, random_cases(1, 16), 16);
}

TEST(ScheduleProperty, RandomValidSchedulesOnThreeRanksTrainLikeOneProcess) {
  expect_every_case_right(3, random_cases(101, 16), 16);
}

std::string fixture(const std::string& name) {
  return " csv:" + test::source_dir() + "/tests/dist/schedules/" + name;
}

// The files of issue 39: zero-bubble, 2 stages per rank in a loop, B (or I) then W later.
TEST(ScheduleProperty, TorchComputeOnlyZeroBubbleFilesTrainLikeOneProcess) {
  expect_every_case_right(
      2, fixture("zb_interleaved_2x2_m8.csv") + fixture("zb_interleaved_2x2_m8_iw.csv"), 2);
  expect_every_case_right(3, fixture("zb_interleaved_3x2_m6.csv"), 1);
}

// Stage 1 takes micro-batch 1 first, but stage 0 sent micro-batch 0 first: validate() refuses
// this file, and run without it the first receive stops, naming both messages.
TEST(ScheduleProperty, AMisroutedMessageNamesWhatWasExpectedAndWhatArrived) {
  TempDir dir;
  write_text(dir / "swapped.csv",
             "0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1\n"
             "1RECV_F1,1F1,1RECV_F0,1F0,1B0,1SEND_B0,1B1,1SEND_B1\n");
  const CommandResult r = launch(2, "unchecked:" + (dir / "swapped.csv"));
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("pipeline stage 1 (rank 1), 1RECV_F1: expected the activations of "
                          "stage 0 for micro-batch 1 from rank 0, but the activations of stage 0 "
                          "for micro-batch 0 arrived"),
            std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace loom::test
