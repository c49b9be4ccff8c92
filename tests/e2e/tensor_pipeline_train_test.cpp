// Tensor parallelism inside pipeline stages (parallel.tensor with parallel.pipeline.stages): 4
// ranks run a GPT as 2 stages of 2 tensor ranks each; each tensor rank runs the pipeline with the
// same-numbered rank of the other stage, the last stage's vocabulary-split logits go into the
// loss across its group, and the tied embedding's slices are summed between the stages. It must
// train like one process on the same global batch (fp32, dropout on), and its checkpoints hold
// the whole tensors under their names.
#include <gtest/gtest.h>

#include "e2e/json_output.h"
#include "e2e/language_model_fixture.h"

namespace loom::test {
namespace {

class TensorPipelineTrain : public LanguageModelTrain {
 protected:
  // 2 stages (split pinned: the planner's own follows block timings on the host) of 2 tensor
  // ranks, 4 micro-batches of 2.
  static std::string tensor_pipeline(const std::string& schedule) {
    return " --set parallel.tensor=2 --set parallel.pipeline.split=2,2" + pipelined(2, 4, schedule);
  }
};

TEST_F(TensorPipelineTrain, TensorGroupsInsidePipelineStagesTrainLikeOneProcess) {
  TempDir dir;
  // Dropout on: each micro-batch's masks are keyed by its samples and each block's by its index
  // (models/draw_key.h), wherever they run.
  const std::string args = gpt_args() + " --set model.gpt.dropout=0.1";
  const auto one = run_loom("train" + args + accumulating(2, 4) + " --out " + (dir / "one"));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  // 1F1B, and zero bubble's split backward (the input's gradient, with the group's sums, apart
  // from the weights').
  // And 1F1B with the sequence split too.
  for (const std::string schedule : {"1f1b", "zb_h1", "1f1b sequence"}) {
    SCOPED_TRACE(schedule);
    const bool sequence = schedule == "1f1b sequence";
    const std::string out = dir / (sequence ? "sequence" : schedule);
    const std::string split = sequence
                                  ? tensor_pipeline("1f1b") + " --set parallel.tensor_sequence=true"
                                  : tensor_pipeline(schedule);
    const auto run = run_loom(launch(4, args + split + " --out " + out));
    ASSERT_EQ(run.exit_code, 0) << run.output;
    expect_like(out, dir / "one");
    const auto s = summary_of(out);
    EXPECT_EQ(s["layout"]["mesh"], nlohmann::json({{"data", 1}, {"pipeline", 2}, {"tensor", 2}}))
        << s["layout"];
    EXPECT_GT(s["step_time"]["share"]["tensor_comm"].get<double>(), 0.0) << s["step_time"];
  }
}

// All three dimensions on 8 ranks: 2 data-parallel replicas of a pipeline of 2 stages, each
// stage a tensor group of 2, plain (clipping counts the first replica's gradients) and with
// ZeRO-1 over each stage's replicas (every rank's shards), dropout on.
TEST_F(TensorPipelineTrain, EightRanksOfDataPipelineAndTensorTrainLikeOneProcess) {
  TempDir dir;
  const std::string args = gpt_args() + " --set model.gpt.dropout=0.1";
  const auto one = run_loom("train" + args + accumulating(2, 8) + " --out " + (dir / "one"));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  for (const std::string zero : {"0", "1"}) {
    SCOPED_TRACE("ZeRO-" + zero);
    const std::string out = dir / ("zero" + zero);
    const auto run = run_loom(
        launch(8, args + tensor_pipeline("1f1b") +
                      " --set data.global_batch=16 --set parallel.zero=" + zero + " --out " + out));
    ASSERT_EQ(run.exit_code, 0) << run.output;
    expect_like(out, dir / "one");
    const auto s = summary_of(out);
    EXPECT_EQ(s["layout"]["mesh"], nlohmann::json({{"data", 2}, {"pipeline", 2}, {"tensor", 2}}))
        << s["layout"];
    EXPECT_EQ(s["layout"]["zero"], std::stoi(zero));
  }
}

// A checkpoint of tensor groups inside pipeline stages holds every tensor whole: one process and
// a plain pipeline go on from it, and it from one process's and a tensor group's; and a tensor
// group's moves to and from a plain pipeline.
TEST_F(TensorPipelineTrain, CheckpointsMoveToOtherLayouts) {
  TempDir dir;
  const std::string args = gpt_args() + " --set schedule.name=constant";
  const std::string one = "train" + args + accumulating(2, 4);
  const auto reference = run_loom(one + " --out " + (dir / "one"));
  ASSERT_EQ(reference.exit_code, 0) << reference.output;
  const std::string half = " --set train.max_steps=4";
  const std::string both = launch(4, args + tensor_pipeline("1f1b"));
  const std::string piped = launch(2, args + pipelined(2, 4, "1f1b"));
  // The loader's batches are a pipeline's micro-batches: the same 2 samples at a time here.
  const std::string tensor = launch(2, args + accumulating(2, 4) + " --set parallel.tensor=2");
  const std::vector<CheckpointMove> moves = {
      {"to one process", both + half, one},
      {"from one process", one + half, both},
      {"to a plain pipeline", both + half, piped},
      {"from a tensor group", tensor + half, both},
      // A tensor group's own checkpoints to and from a plain pipeline.
      {"from a tensor group to a pipeline", tensor + half, piped},
      {"from a pipeline to a tensor group", piped + half, tensor},
  };
  expect_moves(moves, dir, dir / "one");
}

// The planner measures a stage's blocks as a tensor rank runs them: its slices of the products
// and their activations, with the group's collectives priced in (`loom pipeline plan`, the
// plan `loom train` makes for a pipeline).
TEST_F(TensorPipelineTrain, ThePlanMeasuresEachStageAsATensorRankRunsIt) {
  const std::string plan = "pipeline plan --json" + gpt_args() + pipelined(4, 4, "1f1b") +
                           " --set parallel.pipeline.split=2,2";
  const auto whole = run_loom(plan), split = run_loom(plan + " --set parallel.tensor=2");
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  ASSERT_EQ(split.exit_code, 0) << split.output;
  const auto w = json_line(whole.output), t = json_line(split.output);
  EXPECT_EQ(w["tensor_ranks"], 1);
  EXPECT_EQ(t["tensor_ranks"], 2);
  EXPECT_EQ(w["tensor_comm_seconds"], 0.0);
  EXPECT_GT(t["tensor_comm_seconds"].get<double>(), 0.0);
  for (int stage = 0; stage < 2; ++stage) {
    SCOPED_TRACE(stage);
    // Each stage's memory (parameters, their gradients and activations) well below the whole
    // block's: the position table and the LayerNorms stay whole, and so do some activations.
    const double held = t["stages"][stage]["memory_bytes"].get<double>();
    EXPECT_LT(held, 0.8 * w["stages"][stage]["memory_bytes"].get<double>());
    EXPECT_GT(held, 0.0);
    // The job's ranks that run each stage: its tensor group (ranks 2-3 for stage 1), not the
    // stage's rank within a pipeline.
    EXPECT_EQ(w["stages"][stage]["ranks"], nlohmann::json::array({stage}));
    EXPECT_EQ(t["stages"][stage]["ranks"], nlohmann::json::array({2 * stage, 2 * stage + 1}));
  }
}

}  // namespace
}  // namespace loom::test
