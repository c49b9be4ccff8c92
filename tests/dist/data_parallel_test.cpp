// DataParallel across real processes: the parameters after K steps must match one process
// trained on the whole global batch (on both backends, with 2 and 3 ranks, with gradient
// accumulation under no_sync and with bf16 compression), and a parameter without gradient must
// be named unless find_unused_parameters is set.
#include <gtest/gtest.h>

#include "tools/test_support.h"

namespace loom::test {
namespace {

CommandResult launch_dp(int ranks, const std::string& args) {
  return run_loom("launch --nproc-per-node " + std::to_string(ranks) + " --grace 5 -- " +
                  test::dp_worker() + " " + args);
}

void expect_all_ranks_agree(const CommandResult& result, int ranks) {
  EXPECT_EQ(result.exit_code, 0) << result.output;
  for (int r = 0; r < ranks; ++r) {
    EXPECT_NE(result.output.find("rank " + std::to_string(r) + ": "), std::string::npos)
        << result.output;
  }
  EXPECT_NE(result.output.find("4 buckets"), std::string::npos) << result.output;
}

TEST(DataParallel, MatchesOneProcessOnTheGlobalBatchOverShm) {
  expect_all_ranks_agree(launch_dp(2, "equivalence shm"), 2);
}

TEST(DataParallel, MatchesOneProcessOnTheGlobalBatchOverTcp) {
  expect_all_ranks_agree(launch_dp(2, "equivalence tcp"), 2);
}

TEST(DataParallel, MatchesOneProcessWithThreeRanks) {
  expect_all_ranks_agree(launch_dp(3, "equivalence shm"), 3);
}

TEST(DataParallel, NoSyncAccumulationMatchesOneLargeBatch) {
  expect_all_ranks_agree(launch_dp(2, "accumulation shm"), 2);
}

TEST(DataParallel, Bf16CompressionStaysClose) {
  expect_all_ranks_agree(launch_dp(2, "compression tcp"), 2);
}

TEST(DataParallel, NewBucketLimitsMidRunKeepTheResult) {
  const auto result = launch_dp(2, "rebucket shm");
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("rank 1: rebucketing 4 buckets"), std::string::npos)
      << result.output;
  EXPECT_NE(result.output.find("rank 1: rebucket on shm, 5 buckets"), std::string::npos)
      << result.output;
}

TEST(DataParallel, ParameterWithoutGradientIsNamed) {
  const auto result = launch_dp(2, "unused shm");
  EXPECT_NE(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("got no gradient in this backward: unused.weight, unused.bias"),
            std::string::npos)
      << result.output;
  EXPECT_NE(result.output.find("parallel.find_unused_parameters"), std::string::npos)
      << result.output;
}

TEST(DataParallel, FindUnusedParametersTolerates) {
  expect_all_ranks_agree(launch_dp(2, "unused-ok shm"), 2);
}

}  // namespace
}  // namespace loom::test
