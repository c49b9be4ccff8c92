// ZeRO-3 (parallel.zero: 3) with `loom train`: each of 2 ranks keeps half of the parameters, of
// the gradients and of the optimizer state, and gathers a block's parameters when it runs. It
// must train like one process on the same global batch (SGD), with and without recompute and
// accumulation, and like plain data parallelism bit for bit (AdamW); its checkpoints hold the
// parameters under their own names, so they move to and from one process, another world size,
// another ZeRO stage and a pipeline.
#include <gtest/gtest.h>

#include "e2e/language_model_fixture.h"

namespace loom::test {
namespace {

const std::string kZero3 = " --set parallel.zero=3";

TEST_F(LanguageModelTrain, ShardedParametersTrainLikeOneProcessOnHalfTheMemory) {
  TempDir dir;
  const auto one =
      run_loom("train" + gpt_args() + " --set data.batch_size=8 --out " + (dir / "one"));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const auto memory = [&](const std::string& run, const char* what) {
    return summary_of(dir / run)["memory"][what].get<double>();
  };
  const auto zero = run_loom(
      launch(2, gpt_args() + kZero3 + " --set data.global_batch=8 --out " + (dir / "zero3")));
  ASSERT_EQ(zero.exit_code, 0) << zero.output;
  expect_like(dir / "zero3", dir / "one");
  EXPECT_EQ(summary_of(dir / "zero3")["layout"]["zero"], 3);
  // Half of each, but for each block's bucket padded to an even size (4 blocks, 4 bytes each).
  for (const char* what : {"parameter_bytes", "gradient_bytes", "optimizer_state_bytes"}) {
    SCOPED_TRACE(what);
    const double whole = memory("one", what);
    ASSERT_GT(whole, 0);
    EXPECT_GE(memory("zero3", what), 0.5 * whole);
    EXPECT_LE(memory("zero3", what), 0.5 * whole + 16);
  }

  // Recomputed blocks (gathered again for their recompute) and two accumulated micro-batches a
  // rank, with the gathered parameters freed after every block's forward.
  const auto recomputed = run_loom(launch(2, gpt_args() + kZero3 +
                                                 " --set data.batch_size=2 --set train.grad_accum=2"
                                                 " --set train.activation_checkpointing=blocks"
                                                 " --set parallel.zero3_keep=none --out " +
                                                 (dir / "recomputed")));
  ASSERT_EQ(recomputed.exit_code, 0) << recomputed.output;
  expect_like(dir / "recomputed", dir / "one");
}

// Against plain data parallelism with AdamW: the same mean gradients, reduce-scattered instead of
// all-reduced, each element stepped by one rank, the same gathered values in forward: bit for
// bit, whichever blocks keep their parameters for backward.
TEST_F(LanguageModelTrain, ShardedParametersStepLikePlainDataParallelismBitForBit) {
  TempDir dir;
  const std::string adamw =
      " --set optimizer.name=adamw --set optimizer.lr=0.003 --set train.grad_clip=0"
      " --set data.global_batch=8";
  const auto plain = run_loom(launch(2, gpt_args() + adamw + " --out " + (dir / "plain")));
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  for (const std::string keep : {"none", "last", "all"}) {
    SCOPED_TRACE("zero3_keep " + keep);
    const std::string out = dir / keep;
    const auto sharded = run_loom(launch(
        2, gpt_args() + adamw + kZero3 + " --set parallel.zero3_keep=" + keep + " --out " + out));
    ASSERT_EQ(sharded.exit_code, 0) << sharded.output;
    expect_same_model(out, dir / "plain", 0);
  }
  // And under bf16 autocast, whose cache of the weights' bf16 copies must not keep copies made
  // without gradients (the first input's check of the blocks runs outside autocast).
  const std::string bf16 = adamw + " --set runtime.precision=bf16";
  const auto plain_bf16 = run_loom(launch(2, gpt_args() + bf16 + " --out " + (dir / "plain16")));
  ASSERT_EQ(plain_bf16.exit_code, 0) << plain_bf16.output;
  const auto sharded_bf16 =
      run_loom(launch(2, gpt_args() + bf16 + kZero3 + " --out " + (dir / "sharded16")));
  ASSERT_EQ(sharded_bf16.exit_code, 0) << sharded_bf16.output;
  expect_same_model(dir / "sharded16", dir / "plain16", 0);
}

// A ZeRO-3 checkpoint holds every parameter under its name, streamed to rank 0 a block at a
// time: one process, 4 ranks, ZeRO-1 and a pipeline go on from it, and ZeRO-3 from one
// process's.
TEST_F(LanguageModelTrain, ShardedParameterCheckpointsMoveToEveryLayout) {
  TempDir dir;
  const std::string args = gpt_args() + " --set schedule.name=constant";
  const auto reference =
      run_loom("train" + args + " --set data.batch_size=8 --out " + (dir / "one"));
  ASSERT_EQ(reference.exit_code, 0) << reference.output;
  const std::string zero3 = kZero3 + " --set data.global_batch=8";
  const std::string half = " --set train.max_steps=4";
  const std::vector<CheckpointMove> moves = {
      {"to one process", launch(2, args + zero3 + half + " --set checkpoint.async=true"),
       "train" + args + " --set data.batch_size=8"},
      {"from one process", "train" + args + " --set data.batch_size=8" + half,
       launch(2, args + zero3)},
      {"to 4 ranks", launch(2, args + zero3 + half), launch(4, args + zero3)},
      {"to ZeRO-1", launch(2, args + zero3 + half),
       launch(2, args + " --set data.global_batch=8 --set parallel.zero=1")},
      {"to a pipeline", launch(2, args + zero3 + half), launch(2, args + pipelined(8, 1, "gpipe"))},
  };
  expect_moves(moves, dir, dir / "one");
}

// parallel.memory_cap_mb caps a rank's parameters, gradients and optimizer state. A GPT whose
// AdamW state does not fit under ZeRO-2 on 2 ranks is refused before training, naming
// parallel.zero and the stage that fits; under ZeRO-3 it trains.
TEST_F(LanguageModelTrain, AModelOverTheMemoryCapTrainsOnlyWithShardedParameters) {
  TempDir dir;
  // 166,144 parameters, 0.63 MB: AdamW under ZeRO-2 over 2 ranks holds 2.5x that (1.58 MB), under
  // ZeRO-3 2x (1.27 MB).
  const std::string capped =
      gpt_args() +
      " --set optimizer.name=adamw --set optimizer.lr=0.003 --set data.global_batch=8"
      " --set parallel.memory_cap_mb=1.4 --set train.max_steps=2";
  const auto refused =
      run_loom(launch(2, capped + " --set parallel.zero=2 --out " + (dir / "refused")));
  EXPECT_NE(refused.exit_code, 0) << refused.output;
  EXPECT_NE(refused.output.find("config key 'parallel.zero'"), std::string::npos) << refused.output;
  EXPECT_NE(refused.output.find("parallel.zero: 3 takes"), std::string::npos) << refused.output;
  const auto fits = run_loom(launch(2, capped + kZero3 + " --out " + (dir / "fits")));
  ASSERT_EQ(fits.exit_code, 0) << fits.output;
  EXPECT_EQ(summary_of(dir / "fits")["steps"], 2);

  // ZeRO-3 shards over a pipeline's stages' replicas nothing a stage does not already shard with
  // ZeRO-2: refused, naming both keys.
  const auto piped = run_loom("train" + gpt_args() + kZero3 + pipelined(2, 4, "1f1b"));
  EXPECT_EQ(piped.exit_code, 2) << piped.output;
  EXPECT_NE(piped.output.find("parallel.zero"), std::string::npos) << piped.output;
  EXPECT_NE(piped.output.find("parallel.pipeline.stages"), std::string::npos) << piped.output;
}

}  // namespace
}  // namespace loom::test
