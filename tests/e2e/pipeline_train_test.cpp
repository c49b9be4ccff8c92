// `loom launch --nproc-per-node P -- loom train --set parallel.pipeline.stages=P`: the user's view
// of pipeline parallelism. A pipeline of P ranks with M micro-batches of b samples must train
// like one process on batches of b accumulated M times (the same samples in the same order),
// its checkpoints must hold the whole model under the model's names, so that a run moves
// between one process and pipelines of any split, and configurations a pipeline cannot run are
// configuration errors naming the key.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "e2e/json_output.h"
#include "loom/train/safetensors.h"
#include "tools/run_compare.h"
#include "tools/test_support.h"

namespace loom::test {
namespace {

// fp32 and no dropout: what is left to differ is where each block runs.
std::string exact_args() {
  return tiny_synthetic_args() +
         " --set runtime.precision=fp32 --set model.dropout=0 --set train.epochs=2"
         " --set optimizer.lr=0.002";  // a loss still far from 0 at the end
}

std::string pipeline(int ranks, const std::string& args) {
  return "launch --nproc-per-node " + std::to_string(ranks) + " -- " + test::loom_binary() +
         " train " + args + " --set parallel.pipeline.stages=" + std::to_string(ranks);
}

// One process reading micro-batches of `micro` samples and accumulating `m` of them per step;
// and a pipeline of M = `m` micro-batches of the same size (one pipeline's step batch).
std::string accumulating(int micro, int m) {
  return " --set data.batch_size=" + std::to_string(micro) +
         " --set train.grad_accum=" + std::to_string(m);
}
std::string micro_batches(int micro, int m) {
  return " --set data.batch_size=" + std::to_string(micro * m) +
         " --set parallel.pipeline.microbatches=" + std::to_string(m);
}

nlohmann::json json_of(const std::string& path) { return nlohmann::json::parse(read_text(path)); }

// summary.json's pipeline.split ("1,2"): blocks per stage.
nlohmann::json split_of(const nlohmann::json& summary) {
  nlohmann::json counts = nlohmann::json::array();
  std::istringstream text(summary["pipeline"]["split"].get<std::string>());
  for (std::string count; std::getline(text, count, ',');) counts.push_back(std::stoi(count));
  return counts;
}

TEST(PipelineTrain, TwoStagesTrainLikeOneProcessAccumulatingTheMicroBatches) {
  TempDir dir;
  // A tight clip, so that the norm over both stages decides every step.
  const std::string args = exact_args() + " --set model=mlp --set train.grad_clip=0.05";
  const auto single = run_loom("train " + args + accumulating(4, 4) + " --out " + (dir / "one"));
  ASSERT_EQ(single.exit_code, 0) << single.output;
  const auto piped = run_loom(pipeline(2, args) + micro_batches(4, 4) + " --out " + (dir / "two"));
  ASSERT_EQ(piped.exit_code, 0) << piped.output;

  const auto one = json_of(dir / "one/summary.json"), two = json_of(dir / "two/summary.json");
  EXPECT_EQ(two["steps"], one["steps"]);
  EXPECT_EQ(two["samples"], one["samples"]);
  EXPECT_NEAR(two["final_train_loss"].get<double>(), one["final_train_loss"].get<double>(),
              1e-5 * one["final_train_loss"].get<double>());
  EXPECT_NEAR(two["test_loss"].get<double>(), one["test_loss"].get<double>(),
              1e-5 * one["test_loss"].get<double>());
  EXPECT_EQ(two["pipeline"]["ranks"], 2);
  EXPECT_EQ(two["pipeline"]["schedule"], "1f1b");
  ASSERT_EQ(two["pipeline"]["peak_memory_mb"].size(), 2u);
  for (const auto& mb : two["pipeline"]["peak_memory_mb"]) EXPECT_GT(mb.get<double>(), 0.0);
  EXPECT_TRUE(one["pipeline"].is_null());
  // Stage 1 waits while stage 0 computes the first micro-batches: that is the bubble, not
  // communication; one process has none.
  EXPECT_GT(two["step_time"]["share"]["bubble"].get<double>(), 0.0);
  EXPECT_EQ(one["step_time"]["share"]["bubble"].get<double>(), 0.0);
  expect_same_model(dir / "two", dir / "one", 1e-5);

  EXPECT_EQ(two["pipeline"]["backend"], "shm");
  EXPECT_EQ(two["pipeline"]["microbatches"], 4);
  // No parallel.pipeline.split: the partitioner chose one, giving each stage some of the MLP's
  // three blocks; rank 0 reports for both.
  const auto recorded = json_line(run_loom("config --json " + (dir / "two/config.yaml")).output);
  EXPECT_EQ(recorded["parallel"]["pipeline"]["split"], "");
  const auto split = split_of(two);
  ASSERT_EQ(split.size(), 2u) << two["pipeline"];
  EXPECT_GE(split[0].get<int>(), 1);
  EXPECT_GE(split[1].get<int>(), 1);
  EXPECT_EQ(split[0].get<int>() + split[1].get<int>(), 3);
  EXPECT_EQ(count_of(piped.output, "summary:"), 1) << piped.output;
  // The manifest records the layout that wrote the checkpoint.
  const auto manifest = json_of(latest_checkpoint(dir / "two") + "/manifest.json");
  EXPECT_EQ(manifest["layout"]["pipeline"]["ranks"], 2);
  EXPECT_EQ(manifest["layout"]["pipeline"]["split"], split);
}

// Two stages per rank, batch norm buffers in the stages, and the evaluation through them.
TEST(PipelineTrain, InterleavedStagesOfACnnTrainLikeOneProcess) {
  TempDir dir;
  const std::string args = exact_args() + " --set model=cnn --set model.depth=4";
  const auto single = run_loom("train " + args + accumulating(4, 4) + " --out " + (dir / "one"));
  ASSERT_EQ(single.exit_code, 0) << single.output;
  const auto piped = run_loom(
      pipeline(2, args) + micro_batches(4, 4) +
      " --set parallel.pipeline.schedule=interleaved --set parallel.pipeline.chunks=2 --out " +
      (dir / "two"));
  ASSERT_EQ(piped.exit_code, 0) << piped.output;
  const auto one = json_of(dir / "one/summary.json"), two = json_of(dir / "two/summary.json");
  EXPECT_NEAR(two["test_loss"].get<double>(), one["test_loss"].get<double>(),
              1e-5 * one["test_loss"].get<double>());
  EXPECT_DOUBLE_EQ(two["test_accuracy"].get<double>(), one["test_accuracy"].get<double>());
  expect_same_model(dir / "two", dir / "one", 1e-5);
}

// A rank dies right after a checkpoint: the job stops, and resuming in the same layout goes on
// exactly as if nothing had happened.
TEST(PipelineTrain, ResumesBitForBitAfterARankDies) {
  TempDir dir;
  // The split is pinned: the planner's own follows block timings, which may differ between the
  // three runs compared bit for bit.
  const std::string args = exact_args() + " --set model=mlp --set data.batch_size=16" +
                           " --set checkpoint.every_steps=4 --set parallel.pipeline.split=2,1";
  const auto whole = run_loom(pipeline(2, args) + " --out " + (dir / "whole"));
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  const std::string run = pipeline(2, args) + " --out " + (dir / "cut");
  // Stopped with its checkpoints written in the background: rank 1's stages are fetched into
  // rank 0's host buffers at the step boundary.
  const auto stopped =
      run_loom(run + " --set checkpoint.async=true", "LOOM_FAULT_STOP_AFTER_STEP=8");
  EXPECT_NE(stopped.exit_code, 0) << stopped.output;
  const auto resumed = run_loom(run + " --resume");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_EQ(json_of(dir / "cut/summary.json")["resumed_from_step"], 8);
  expect_same_model(dir / "cut", dir / "whole", 0);
}

// A checkpoint goes from a 2-stage pipeline to one process and back to a pipeline of another
// schedule and split, and ends where one process alone ends.
TEST(PipelineTrain, CheckpointsMoveBetweenPipelinesAndOneProcess) {
  TempDir dir;
  // A constant learning rate: train.max_steps then only says where each part stops.
  const std::string args = exact_args() + " --set model=cnn --set schedule.name=constant";
  const std::string one_process = "train " + args + accumulating(4, 4);
  const std::string piped = micro_batches(4, 4);
  const auto reference = run_loom(one_process + " --set train.max_steps=24 --out " + (dir / "one"));
  ASSERT_EQ(reference.exit_code, 0) << reference.output;

  const std::string moved = " --out " + (dir / "moved");
  auto part = run_loom(pipeline(2, args) + piped + " --set train.max_steps=8" + moved);
  ASSERT_EQ(part.exit_code, 0) << part.output;
  part = run_loom(one_process + " --set train.max_steps=16 " + kDefaultsOnly + " --resume" + moved);
  ASSERT_EQ(part.exit_code, 0) << part.output;
  EXPECT_EQ(json_of(dir / "moved/summary.json")["resumed_from_step"], 8);
  part = run_loom(pipeline(2, args) + piped +
                  " --set parallel.pipeline.schedule=gpipe --set parallel.pipeline.split=2,1"
                  " --set train.max_steps=24 " +
                  kDefaultsOnly + " --resume" + moved);
  ASSERT_EQ(part.exit_code, 0) << part.output;
  EXPECT_EQ(json_of(dir / "moved/summary.json")["resumed_from_step"], 16);
  const auto manifest = json_of(latest_checkpoint(dir / "moved") + "/manifest.json");
  EXPECT_EQ(manifest["layout"]["pipeline"]["schedule"], "gpipe");
  EXPECT_EQ(manifest["layout"]["pipeline"]["split"], nlohmann::json::array({2, 1}));
  expect_same_model(dir / "moved", dir / "one", 1e-5);
}

// Four ranks: two pipelines of two stages, data parallel. Each pipeline takes half of the global
// batch; the two ranks of each stage sum their gradients. Together they train like one process
// on the whole batch, cut into as many micro-batches.
TEST(PipelineTrain, TwoPipelinesOfTwoStagesTrainLikeOneProcess) {
  TempDir dir;
  const std::string args = exact_args() + " --set model=mlp --set train.grad_clip=0.05";
  const auto single = run_loom("train " + args + accumulating(8, 4) + " --out " + (dir / "one"));
  ASSERT_EQ(single.exit_code, 0) << single.output;
  const auto one = json_of(dir / "one/summary.json");
  // 1F1B exchanges a stage's gradients from its last B; ZB-H1 from its last W.
  for (const std::string schedule : {"1f1b", "zb_h1"}) {
    SCOPED_TRACE(schedule);
    const std::string out = dir / ("four-" + schedule);
    const auto both =
        run_loom("launch --nproc-per-node 4 -- " + test::loom_binary() + " train " + args +
                 " --set parallel.pipeline.stages=2 --set parallel.pipeline.schedule=" + schedule +
                 " --set parallel.pipeline.microbatches=4 --set data.global_batch=32"
                 " --set checkpoint.every_steps=0 --out " +
                 out);
    ASSERT_EQ(both.exit_code, 0) << both.output;
    const auto four = json_of(out + "/summary.json");
    EXPECT_EQ(four["steps"], one["steps"]);
    EXPECT_EQ(four["samples"], one["samples"]);
    EXPECT_EQ(four["data_parallel"]["ranks"], 2);
    EXPECT_EQ(four["pipeline"]["ranks"], 2);
    EXPECT_NEAR(four["final_train_loss"].get<double>(), one["final_train_loss"].get<double>(),
                1e-5 * one["final_train_loss"].get<double>());
    EXPECT_NEAR(four["test_loss"].get<double>(), one["test_loss"].get<double>(),
                1e-5 * one["test_loss"].get<double>());
    expect_same_model(out, dir / "one", 1e-5);
    EXPECT_EQ(count_of(both.output, "summary:"), 1) << both.output;
  }
}

// Ranks that disagree about the model (here rank 1 builds a wider CNN than rank 0): the stage
// that receives activations of the wrong shape stops with both shapes, its stage and rank, and
// the job exits non-zero instead of hanging.
TEST(PipelineTrain, AShapeMismatchBetweenStagesNamesBothShapes) {
  TempDir dir;
  const auto r =
      run_loom("launch --nproc-per-node 2 -- sh -c '" + test::loom_binary() + " train " +
               tiny_synthetic_args() + " --set model=cnn --set parallel.pipeline.stages=2" +
               " --set parallel.pipeline.split=1,2 --set comm.timeout_s=10" +
               " --set model.width=$((16 * (RANK + 1))) --out " + dir.path() + "'");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("pipeline stage 1 (rank 1), 1F0: forward on an input of shape [4, 16,"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("to have 32 channels"), std::string::npos) << r.output;
}

// The last stage sees the loss, but every stage stops at that step, and the last good
// checkpoint (gathered from both ranks) holds finite values.
TEST(PipelineTrain, ANonFiniteLossStopsTheStepOnEveryRank) {
  TempDir dir;
  // Each rank reports its error to its own file. Every stage stops at the step; rank 0, which
  // writes the checkpoints, names the last good one.
  const auto r =
      run_loom(pipeline(2, tiny_synthetic_args()) +
                   " --set model=mlp --set optimizer.lr=1e30 "
                   "--set schedule.warmup_steps=0 --set checkpoint.every_steps=1 --out " +
                   dir.path(),
               "LOOM_ERROR_FILE=" + dir.path() + "/error-{rank}.json");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  for (const char* rank : {"0", "1"}) {
    const auto error = test::json_file(dir.path() + "/error-" + rank + ".json");
    EXPECT_EQ(error["fields"]["problem"], "non_finite_loss") << error.dump();
    EXPECT_EQ(error["fields"]["step"], "2") << error.dump();
  }
  const auto first = test::json_file(dir.path() + "/error-0.json");
  EXPECT_EQ(first["fields"]["checkpoint"], latest_checkpoint(dir.path())) << first.dump();
  const auto model = model_of(dir.path());
  EXPECT_EQ(model.size(), 6u);  // three linear layers' weights and biases, from both stages
  for (const auto& [name, t] : model) EXPECT_TRUE(t.isfinite().all().item<bool>()) << name;
}

TEST(PipelineTrain, WhatAPipelineCannotRunIsAConfigurationError) {
  TempDir dir;
  const std::string args = tiny_synthetic_args() + " --set model=mlp --out " + dir.path();
  auto r = run_loom("train " + args + " --set parallel.pipeline.stages=2");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("parallel.pipeline.stages"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("loom launch --nproc-per-node 2"), std::string::npos) << r.output;

  r = run_loom("launch --nproc-per-node 3 -- " + test::loom_binary() + " train " + args +
               " --set parallel.pipeline.stages=2");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("do not divide the 3 ranks"), std::string::npos) << r.output;

  r = run_loom(pipeline(2, args) + " --set train.grad_accum=2");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("train.grad_accum"), std::string::npos) << r.output;

  r = run_loom(pipeline(2, args) + " --set parallel.pipeline.microbatches=5");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("parallel.pipeline.microbatches"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace loom::test
