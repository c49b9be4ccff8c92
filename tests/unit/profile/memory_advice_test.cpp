// The advisor near the memory cap (profile/memory_advice.h): what recompute and the ZeRO stages
// would save.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "loom/profile/advisor.h"
#include "unit/profile/advisor_runs.h"

namespace loom::profile {
namespace {

// Near the memory cap: recompute and ZeRO-1 each say what they would save, and neither is
// suggested once on; far from it, nothing is said.
TEST(Advisor, NearTheMemoryCapRecomputeAndShardedStateSayWhatTheySave) {
  constexpr double kMiB = 1 << 20;
  RunProfile r = run_waiting(0.0);
  r.memory_cap_bytes = 1000 * kMiB;
  r.peak_tensor_bytes = 900 * kMiB;
  r.parameter_bytes = 100 * kMiB;        // and as much again of gradients
  r.optimizer_state_bytes = 200 * kMiB;  // AdamW: two moments
  r.data_parallel_ranks = 2;
  auto findings = advise(r);
  const Finding* recompute = find(findings, "memory_recompute");
  ASSERT_NE(recompute, nullptr);
  EXPECT_EQ(recompute->key, "train.activation_checkpointing");
  EXPECT_EQ(recompute->suggested, "blocks");
  EXPECT_DOUBLE_EQ(recompute->measured.at("cap_share"), 0.9);
  // 900 - 2 x 100 - 200 = 500 MB of activations, three quarters of them saved.
  EXPECT_DOUBLE_EQ(recompute->measured.at("activation_bytes"), 500 * kMiB);
  EXPECT_DOUBLE_EQ(recompute->measured.at("saved_bytes"), 375 * kMiB);
  const Finding* zero = find(findings, "memory_zero");
  ASSERT_NE(zero, nullptr);
  EXPECT_EQ(zero->key, "parallel.zero");
  EXPECT_DOUBLE_EQ(zero->measured.at("zero1_saved_bytes"), 100 * kMiB);  // half the state
  EXPECT_DOUBLE_EQ(zero->measured.at("zero2_saved_bytes"), 50 * kMiB);   // half the gradients

  r.zero_stage = 1;  // ZeRO-1 keeps the whole gradient buckets and its shard: ZeRO-2 frees them
  findings = advise(r);
  zero = find(findings, "memory_zero");
  ASSERT_NE(zero, nullptr);
  EXPECT_EQ(zero->suggested, "2");
  EXPECT_EQ(zero->measured.count("zero1_saved_bytes"), 0u);
  EXPECT_DOUBLE_EQ(zero->measured.at("zero2_saved_bytes"), 100 * kMiB);  // the whole buckets

  r.pipeline_ranks = 2;            // ZeRO-3 is a configuration error with pipeline stages
  r.accumulates_gradients = true;  // as a pipeline's micro-batches: ZeRO-2 saves nothing more
  findings = advise(r);
  EXPECT_EQ(find(findings, "memory_zero"), nullptr);
  r.zero_stage = 0;
  findings = advise(r);
  zero = find(findings, "memory_zero");
  ASSERT_NE(zero, nullptr);
  EXPECT_EQ(zero->suggested, "1");
  EXPECT_EQ(zero->measured.count("zero2_saved_bytes"), 0u);
  EXPECT_EQ(zero->measured.count("zero3_saved_bytes"), 0u);
  r.accumulates_gradients = false;

  r.recompute = true;
  r.zero_stage = 2;
  findings = advise(r);
  EXPECT_EQ(find(findings, "memory_recompute"), nullptr);
  EXPECT_EQ(find(findings, "memory_zero"), nullptr);
  r.pipeline_ranks = 0;

  r = run_waiting(0.0);
  r.memory_cap_bytes = 1000 * kMiB;
  r.peak_tensor_bytes = 500 * kMiB;
  r.data_parallel_ranks = 2;
  r.optimizer_state_bytes = 200 * kMiB;
  EXPECT_EQ(find(advise(r), "memory_zero"), nullptr);
}

// Near parallel.memory_cap_mb, data parallelism below ZeRO-3 on several ranks and no pipeline:
// the advice names parallel.zero: 3 and what it saves, the parameters' (1 - 1/N) plus what
// ZeRO-2 would save where the run is below it, and the total by the model-state formula.
TEST(Advisor, NearTheMemoryCapShardedParametersSayWhatTheySave) {
  constexpr double kMiB = 1 << 20;
  RunProfile r = run_waiting(0.0);
  r.memory_cap_bytes = 500 * kMiB;
  r.peak_tensor_bytes = 450 * kMiB;
  r.parameter_bytes = 100 * kMiB;
  r.optimizer_state_bytes = 100 * kMiB;  // AdamW's 200 MB sharded over 2 by ZeRO-2
  r.data_parallel_ranks = 2;
  r.recompute = true;
  r.zero_stage = 2;
  // parallel::model_state_per_parameter_byte over 2 ranks with AdamW: 4, 3.5, 2.5 and 2 bytes
  // a byte of parameters.
  r.model_state_bytes = {400 * kMiB, 350 * kMiB, 250 * kMiB, 200 * kMiB};
  std::vector<Finding> findings = advise(r);
  const Finding* zero = find(findings, "memory_zero");
  ASSERT_NE(zero, nullptr);
  EXPECT_EQ(zero->key, "parallel.zero");
  EXPECT_EQ(zero->evidence,
            "peak tensor memory 450 MB is 90% of the 500 MB cap "
            "(parallel.memory_cap_mb)");
  EXPECT_DOUBLE_EQ(zero->measured.at("cap_bytes"), 500 * kMiB);
  EXPECT_DOUBLE_EQ(zero->measured.at("zero3_saved_bytes"), 50 * kMiB);
  EXPECT_DOUBLE_EQ(zero->measured.at("model_state_bytes"), 250 * kMiB);
  EXPECT_DOUBLE_EQ(zero->measured.at("zero3_model_state_bytes"), 200 * kMiB);

  r.zero_stage = 1;  // ZeRO-2's gradients come with it: 350 - 200 MB in all
  r.optimizer_state_bytes = 100 * kMiB;
  findings = advise(r);
  zero = find(findings, "memory_zero");
  ASSERT_NE(zero, nullptr);
  EXPECT_DOUBLE_EQ(zero->measured.at("zero2_saved_bytes"), 100 * kMiB);
  EXPECT_DOUBLE_EQ(zero->measured.at("zero3_saved_bytes"), 50 * kMiB);
  EXPECT_DOUBLE_EQ(
      zero->measured.at("model_state_bytes") - zero->measured.at("zero3_model_state_bytes"),
      150 * kMiB);

  r.zero_stage = 0;  // and ZeRO-1's state: 400 - 200 MB
  r.optimizer_state_bytes = 200 * kMiB;
  findings = advise(r);
  zero = find(findings, "memory_zero");
  ASSERT_NE(zero, nullptr);
  EXPECT_EQ(zero->suggested, "1");  // the first stage that helps
  EXPECT_DOUBLE_EQ(zero->measured.at("zero3_saved_bytes"), 50 * kMiB);
  EXPECT_DOUBLE_EQ(
      zero->measured.at("model_state_bytes") - zero->measured.at("zero3_model_state_bytes"),
      200 * kMiB);

  r.zero_stage = 3;  // nothing left to shard
  EXPECT_EQ(find(advise(r), "memory_zero"), nullptr);
  r.zero_stage = 2;
  r.data_parallel_ranks = 1;  // nothing to shard over
  EXPECT_EQ(find(advise(r), "memory_zero"), nullptr);
  r.data_parallel_ranks = 2;
  r.peak_tensor_bytes = 300 * kMiB;  // 60% of the cap: nothing said
  EXPECT_EQ(find(advise(r), "memory_zero"), nullptr);
}

}  // namespace
}  // namespace loom::profile
