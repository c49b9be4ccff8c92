// Tensor parallelism (parallel.tensor) with `loom train`: a GPT's attention split by heads and
// its MLP by its hidden width over the ranks of a tensor group, alone and inside data-parallel
// replicas, with and without the sequence split too. Each must train like one process on the
// same global batch with dropout on: every rank of a group draws the masks one process draws,
// and every sample's masks are its own wherever it is (models/draw_key.h). Checkpoints hold the
// whole tensors under their names, so they move to and from one process and other layouts.
#include <gtest/gtest.h>

#include <algorithm>

#include "e2e/language_model_fixture.h"

namespace loom::test {
namespace {

const std::string kTensor2 = " --set parallel.tensor=2";

TEST_F(LanguageModelTrain, TensorParallelRanksTrainLikeOneProcessWithDropout) {
  TempDir dir;
  const std::string args = gpt_args() + " --set model.gpt.dropout=0.1 --set data.batch_size=8";
  const auto one = run_loom("train" + args + " --out " + (dir / "one"));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const auto split = run_loom(launch(2, args + kTensor2 + " --out " + (dir / "tp")));
  ASSERT_EQ(split.exit_code, 0) << split.output;
  expect_like(dir / "tp", dir / "one");
  const auto s = summary_of(dir / "tp");
  EXPECT_EQ(s["layout"]["mesh"], nlohmann::json({{"data", 1}, {"tensor", 2}})) << s["layout"];
  // The GPT's plan as applied: of each of the 2 layers, the attention's and the MLP's products
  // (their weights, and the column-split ones' biases: 6), and the token embedding.
  const auto& tp = s["tensor_parallel"];
  EXPECT_EQ(tp["ranks"], 2);
  EXPECT_EQ(tp["sequence"], false);
  EXPECT_EQ(tp["plan"][0],
            nlohmann::json({{"pattern", "h.*.attn.c_attn"}, {"style", "colwise(sections=3)"}}));
  EXPECT_NE(std::find(tp["plan"].begin(), tp["plan"].end(),
                      nlohmann::json({{"pattern", "wte"}, {"style", "vocabulary"}})),
            tp["plan"].end())
      << tp;
  EXPECT_EQ(tp["cut_parameters"], 2 * 6 + 1);
  EXPECT_TRUE(summary_of(dir / "one")["tensor_parallel"].is_null());
  // Each rank holds half of every layer's products and of the token embedding (the vocabulary of
  // 1000 divides); the position table and the LayerNorms stay whole.
  const double whole = summary_of(dir / "one")["memory"]["parameter_bytes"].get<double>();
  const double held = s["memory"]["parameter_bytes"].get<double>();
  EXPECT_LT(held, 0.8 * whole);
  EXPECT_GT(held, 0.5 * whole);
  // The group's all-reduces are their own phase of the step; one process has none.
  EXPECT_GT(s["step_time"]["share"]["tensor_comm"].get<double>(), 0.0) << s["step_time"];
  EXPECT_EQ(summary_of(dir / "one")["step_time"]["share"]["tensor_comm"].get<double>(), 0.0);
}

// 2 data-parallel replicas of a tensor group of 2, plain and with ZeRO over the replicas (each
// sharding its tensor rank's slices; clipping sums the shards' pieces over all 4 ranks, a whole
// parameter's once), with dropout on.
TEST_F(LanguageModelTrain, TensorGroupsInsideDataParallelReplicasTrainLikeOneProcess) {
  TempDir dir;
  const std::string args = gpt_args() + " --set model.gpt.dropout=0.1";
  const auto one = run_loom("train" + args + " --set data.batch_size=8 --out " + (dir / "one"));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  for (const std::string zero : {"0", "1", "3"}) {
    SCOPED_TRACE("ZeRO-" + zero);
    const std::string out = dir / ("zero" + zero);
    const auto run = run_loom(launch(4, args + kTensor2 + " --set parallel.zero=" + zero +
                                            " --set data.global_batch=8 --out " + out));
    ASSERT_EQ(run.exit_code, 0) << run.output;
    expect_like(out, dir / "one");
    const auto s = summary_of(out);
    EXPECT_EQ(s["layout"]["mesh"], nlohmann::json({{"data", 2}, {"tensor", 2}})) << s["layout"];
    EXPECT_EQ(s["layout"]["zero"], std::stoi(zero));
  }
}

// A tensor-parallel checkpoint holds every tensor whole under its name: one process, a group of
// 4, 2 x 2 ranks and ZeRO go on from it, and tensor parallelism from one process's.
TEST_F(LanguageModelTrain, TensorParallelCheckpointsMoveToOtherLayouts) {
  TempDir dir;
  const std::string args = gpt_args() + " --set schedule.name=constant";
  const std::string batch = " --set data.batch_size=8";
  const auto reference = run_loom("train" + args + batch + " --out " + (dir / "one"));
  ASSERT_EQ(reference.exit_code, 0) << reference.output;
  const std::string half = " --set train.max_steps=4";
  const std::vector<CheckpointMove> moves = {
      {"to one process", launch(2, args + batch + kTensor2 + half), "train" + args + batch},
      {"from one process", "train" + args + batch + half, launch(2, args + batch + kTensor2)},
      {"to a tensor group of 4", launch(2, args + batch + kTensor2 + half),
       launch(4, args + batch + " --set parallel.tensor=4")},
      {"to 2 x 2 ranks", launch(2, args + batch + kTensor2 + half),
       launch(4, args + kTensor2 + " --set data.global_batch=8")},
      {"to ZeRO-1", launch(2, args + batch + kTensor2 + half),
       launch(2, args + " --set data.global_batch=8 --set parallel.zero=1")},
      {"from 2 x 2 ranks under ZeRO-1",
       launch(4, args + kTensor2 + " --set data.global_batch=8 --set parallel.zero=1" + half),
       "train" + args + batch},
  };
  expect_moves(moves, dir, dir / "one");
}

// Sequence parallelism (parallel.tensor_sequence): the LayerNorms, dropouts and residual stream
// split by the sequence too, all-gathers and reduce-scatters in place of the all-reduces. Each
// rank draws the dropout masks of every position, as one process does, and keeps its own.
TEST_F(LanguageModelTrain, SequenceParallelRanksTrainLikeOneProcessWithDropout) {
  TempDir dir;
  const std::string args = gpt_args() + " --set model.gpt.dropout=0.1 --set data.batch_size=8";
  const auto one = run_loom("train" + args + " --out " + (dir / "one"));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const auto split = run_loom(
      launch(2, args + kTensor2 + " --set parallel.tensor_sequence=true --out " + (dir / "sp")));
  ASSERT_EQ(split.exit_code, 0) << split.output;
  expect_like(dir / "sp", dir / "one");
  const auto s = summary_of(dir / "sp");
  EXPECT_EQ(s["layout"]["mesh"], nlohmann::json({{"data", 1}, {"tensor", 2}})) << s["layout"];
  EXPECT_GT(s["step_time"]["share"]["tensor_comm"].get<double>(), 0.0) << s["step_time"];
}

// 2 data-parallel replicas of a sequence-parallel group of 2, under ZeRO-1: the parameters used
// on a rank's positions only (LayerNorms, biases, the position table) have their gradients
// whole before the replicas' exchange sees them. Dropout on.
TEST_F(LanguageModelTrain, SequenceParallelGroupsInsideZeroReplicasTrainLikeOneProcess) {
  TempDir dir;
  const std::string args = gpt_args() + " --set model.gpt.dropout=0.1";
  const auto one = run_loom("train" + args + " --set data.batch_size=8 --out " + (dir / "one"));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const auto run = run_loom(launch(4, args + kTensor2 +
                                          " --set parallel.tensor_sequence=true"
                                          " --set parallel.zero=1 --set data.global_batch=8"
                                          " --out " +
                                          (dir / "sp")));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  expect_like(dir / "sp", dir / "one");
  const auto s = summary_of(dir / "sp");
  EXPECT_EQ(s["layout"]["mesh"], nlohmann::json({{"data", 2}, {"tensor", 2}})) << s["layout"];
  EXPECT_EQ(s["layout"]["zero"], 1);
}

TEST_F(LanguageModelTrain, SequenceParallelismOverAContextThatDoesNotSplitIsAConfigurationError) {
  TempDir dir;
  const auto odd = run_loom(launch(2, gpt_args() + kTensor2 +
                                          " --set parallel.tensor_sequence=true"
                                          " --set data.seq_len=31 --out " +
                                          (dir / "odd")));
  EXPECT_EQ(odd.exit_code, 2) << odd.output;
  EXPECT_NE(odd.output.find("parallel.tensor_sequence"), std::string::npos) << odd.output;
  EXPECT_NE(odd.output.find("data.seq_len"), std::string::npos) << odd.output;
}

TEST_F(LanguageModelTrain, TensorParallelismThatCannotBeIsAConfigurationError) {
  TempDir dir;
  // 4 heads do not split over 3 ranks: every rank finds it, rank 0 says it once with the sizes
  // that would work, and the others end without a word (each still reports it, to its own file).
  const auto heads =
      run_loom(launch(3, gpt_args() + " --set parallel.tensor=3 --out " + (dir / "heads")),
               "LOOM_ERROR_FILE=" + (dir / "error.{rank}.json"));
  EXPECT_NE(heads.exit_code, 0) << heads.output;
  EXPECT_EQ(count_of(heads.output, "config key 'parallel.tensor'"), 1) << heads.output;
  EXPECT_NE(heads.output.find("model.gpt.n_head"), std::string::npos) << heads.output;
  EXPECT_EQ(count_of(heads.output, "ending now"), 0) << heads.output;
  const auto error = json_file(dir / "error.0.json");
  EXPECT_EQ(error["exit_code"], 2);
  EXPECT_EQ(error["fields"]["key"], "parallel.tensor");
  EXPECT_EQ(error["fields"]["value"], "3");
  EXPECT_EQ(error["fields"]["allowed"], "1, 2 or 4");
  // Not with parameter servers: both keys named.
  const auto servers = run_loom("train" + gpt_args() + kTensor2 + " --set parallel.mode=ps");
  EXPECT_EQ(servers.exit_code, 2) << servers.output;
  EXPECT_NE(servers.output.find("parallel.tensor"), std::string::npos) << servers.output;
  EXPECT_NE(servers.output.find("parallel.mode"), std::string::npos) << servers.output;
  // A model without a split.
  const auto cnn = run_loom("train --set model=cnn --set train.max_steps=1" + kTensor2);
  EXPECT_EQ(cnn.exit_code, 2) << cnn.output;
  EXPECT_NE(cnn.output.find("parallel.tensor"), std::string::npos) << cnn.output;
}

}  // namespace
}  // namespace loom::test
