// DataParallel across real processes: the parameters after K steps must match one process
// trained on the whole global batch (on both backends, with 2 and 3 ranks, with gradient
// accumulation under no_sync and with bf16 compression), and a parameter without gradient must
// be named unless find_unused_parameters is set.
#include <gtest/gtest.h>

#include "dist/comm_scenarios.h"
#include "tools/test_support.h"

namespace loom::test {
namespace {

// The facts dp_worker printed on `event` for rank `rank`: its facts line, or none.
ErrorFields facts_of(const CommandResult& result, int rank, const std::string& event) {
  for (ErrorFields& facts : facts_in(result.output)) {
    if (facts["rank"] == std::to_string(rank) && facts["event"] == event) return facts;
  }
  return {};
}

CommandResult launch_dp(int ranks, const std::string& args) {
  return run_loom("launch --nproc-per-node " + std::to_string(ranks) + " --grace 5 -- " +
                  test::dp_worker() + " " + args);
}

void expect_all_ranks_agree(const CommandResult& result, int ranks) {
  EXPECT_EQ(result.exit_code, 0) << result.output;
  for (int r = 0; r < ranks; ++r) {
    ErrorFields facts = facts_of(result, r, "trained");
    EXPECT_EQ(facts["within_tolerance"], "yes") << result.output;
    EXPECT_EQ(facts["buckets"], "4") << result.output;
  }
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
  EXPECT_EQ(facts_of(result, 1, "rebucketing")["buckets"], "4") << result.output;
  ErrorFields trained = facts_of(result, 1, "trained");
  EXPECT_EQ(trained["scenario"], "rebucket") << result.output;
  EXPECT_EQ(trained["backend"], "shm") << result.output;
  EXPECT_EQ(trained["buckets"], "5") << result.output;
}

TEST(DataParallel, ParameterWithoutGradientIsNamed) {
  const auto result = launch_dp(2, "unused shm");
  EXPECT_NE(result.exit_code, 0) << result.output;
  // The launcher stops the other rank once one fails: at least one says why.
  ErrorFields error = facts_of(result, 0, "error");
  if (error.empty()) error = facts_of(result, 1, "error");
  EXPECT_EQ(error["problem"], "no_gradient") << result.output;
  EXPECT_EQ(error["parameters"], "unused.weight,unused.bias") << result.output;
  EXPECT_EQ(error["key"], "parallel.find_unused_parameters") << result.output;
}

TEST(DataParallel, FindUnusedParametersTolerates) {
  expect_all_ranks_agree(launch_dp(2, "unused-ok shm"), 2);
}

}  // namespace
}  // namespace loom::test
