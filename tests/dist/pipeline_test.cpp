// Pipelines across real processes: every schedule, on 2 and 3 ranks, gives the parameters and
// losses of one process on the same micro-batches (relative error <= 1e-5, fp32), and a rank
// that stops answering makes the others fail within the timeout, naming stage and rank.
#include <gtest/gtest.h>

#include "tools/test_support.h"

namespace loom::test {
namespace {

CommandResult launch_pipeline(int ranks, const std::string& args) {
  return run_loom("launch --nproc-per-node " + std::to_string(ranks) + " --grace 5 -- " +
                  test::pipeline_worker() + " " + args);
}

void expect_matches_one_process(int ranks, const std::string& args) {
  const CommandResult r = launch_pipeline(ranks, args);
  EXPECT_EQ(r.exit_code, 0) << args << "\n" << r.output;
  for (int rank = 0; rank < ranks; ++rank) {
    EXPECT_NE(r.output.find("rank " + std::to_string(rank) + ": "), std::string::npos)
        << args << "\n"
        << r.output;
  }
}

TEST(Pipeline, EveryScheduleMatchesOneProcessOnTwoRanks) {
  for (const std::string args :
       {"gpipe 1 3 shm", "gpipe 2 1 shm", "1f1b 1 2 shm", "1f1b 1 5 shm", "interleaved 2 2 shm",
        "interleaved 2 4 shm", "zb_h1 1 2 shm", "zb_h1 1 5 shm"}) {
    expect_matches_one_process(2, args);
  }
}

TEST(Pipeline, EveryScheduleMatchesOneProcessOnThreeRanks) {
  for (const std::string args :
       {"gpipe 1 2 shm", "1f1b 1 3 shm", "1f1b 1 7 shm", "interleaved 2 3 shm", "zb_h1 1 4 shm"}) {
    expect_matches_one_process(3, args);
  }
}

TEST(Pipeline, MatchesOneProcessOverTcp) { expect_matches_one_process(2, "1f1b 1 4 tcp"); }

TEST(Pipeline, StalledRankIsNamedWithTheStage) {
  const CommandResult r = launch_pipeline(2, "1f1b 1 2 shm stall");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("pipeline stage 0 (rank 0)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("waiting for stage 1 on rank 1"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace loom::test
