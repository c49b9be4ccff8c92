// `loom pipeline plan` as a user runs it: a real model profiled block by block, partitioned,
// its schedule simulated and written out; impossible plans are configuration errors that say
// what would work.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>

#include "tools/test_support.h"

namespace loom::test {
namespace {

std::string resnet_args() {
  return tiny_synthetic_args() + " --set model=resnet18 --set data.image_size=32";
}

TEST(PipelinePlan, ProfilesPartitionsAndSimulates) {
  TempDir dir;
  const auto r = run_loom("pipeline plan " + resnet_args() +
                          " --set parallel.pipeline.stages=2 --set parallel.pipeline.microbatches=4"
                          " --trace " +
                          (dir / "plan.json") + " --csv " + (dir / "plan.csv"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("pipeline: 1f1b, 2 ranks x 1 stage each, 4 micro-batches of 4 samples "
                          "(resnet18, 10 blocks)"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("stage 0 on rank 0: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("stage 1 on rank 1: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("..head"), std::string::npos) << r.output;  // the last stage ends it
  EXPECT_NE(r.output.find("simulated step"), std::string::npos) << r.output;

  // The trace has both ranks' forward and backward slices.
  const auto trace = nlohmann::json::parse(read_text(dir / "plan.json"));
  std::set<std::string> names;
  std::set<int> ranks;
  for (const auto& e : trace.at("traceEvents")) {
    if (e.at("ph") != "X") continue;
    names.insert(e.at("name").get<std::string>());
    ranks.insert(e.at("pid").get<int>());
  }
  EXPECT_EQ(ranks, (std::set<int>{0, 1}));
  EXPECT_TRUE(names.count("0F3") && names.count("1B0")) << trace.dump();

  // The CSV written goes back in as the schedule and gives the same plan.
  const auto again = run_loom("pipeline plan " + resnet_args() +
                              " --set parallel.pipeline.stages=2 --set "
                              "parallel.pipeline.microbatches=4 --set parallel.pipeline.schedule=" +
                              (dir / "plan.csv"));
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("pipeline: " + (dir / "plan.csv") + ", 2 ranks"), std::string::npos)
      << again.output;
}

TEST(PipelinePlan, ManualSplitAndInterleaving) {
  const auto r = run_loom("pipeline plan " + resnet_args() +
                          " --set parallel.pipeline.stages=2 --set parallel.pipeline.chunks=2"
                          " --set parallel.pipeline.schedule=interleaved"
                          " --set parallel.pipeline.split=1,3,3,3");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("partition (parallel.pipeline.split)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("stage 2 on rank 0: 3 blocks"), std::string::npos) << r.output;
}

// Two micro-batches on two stages leave a third of the step idle: the plan says how many would
// shrink that, from the same profile. ViT's equal encoder blocks split evenly, so the bubble is
// the schedule's own (P-1)/(M+P-1) and shrinks with M whatever the timings.
TEST(PipelinePlan, LargeBubbleSuggestsMoreMicroBatches) {
  const auto r =
      run_loom("pipeline plan " + tiny_synthetic_args() +
               " --set model=vit_tiny --set data.image_size=32 --set model.patch_size=8"
               " --set parallel.pipeline.stages=2 --set parallel.pipeline.microbatches=2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("raise parallel.pipeline.microbatches to "), std::string::npos)
      << r.output;
}

TEST(PipelinePlan, ImpossiblePlansAreConfigErrorsThatSayWhatWorks) {
  TempDir dir;
  struct Case {
    std::string args, message;
  };
  for (const auto& c : std::vector<Case>{
           {"--set parallel.pipeline.stages=4 --set parallel.pipeline.microbatches=2",
            "1f1b needs at least as many micro-batches as stages"},
           {"--set parallel.pipeline.stages=2 --set parallel.pipeline.memory_cap_mb=1",
            "raise the cap to that"},
           {"--set parallel.pipeline.stages=2 --set parallel.pipeline.split=5,4",
            "the stages hold 9 blocks, the model has 10"},
           {"--set parallel.pipeline.stages=2 --set parallel.pipeline.microbatches=3",
            "does not split into 3 equal micro-batches"},
           {"--set parallel.pipeline.stages=2 --set parallel.pipeline.schedule=zigzag",
            "unknown schedule 'zigzag'"},
       }) {
    const auto r = run_loom("pipeline plan " + resnet_args() + " " + c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args << "\n" << r.output;
    EXPECT_NE(r.output.find(c.message), std::string::npos) << c.args << "\n" << r.output;
  }
  // A hand-written schedule that breaks a rule names it.
  // Rank 0 runs its backward without receiving the gradient from rank 1.
  write_text(dir / "bad.csv",
             "0F0,0SEND_F0,0B0,0F1,0SEND_F1,0B1\n"
             "1RECV_F0,1F0,1B0,1SEND_B0,1RECV_F1,1F1,1B1,1SEND_B1\n");
  const auto r = run_loom("pipeline plan " + resnet_args() +
                          " --set parallel.pipeline.stages=2 --set parallel.pipeline.microbatches=2"
                          " --set parallel.pipeline.schedule=" +
                          (dir / "bad.csv"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("backward before receiving its output gradient"), std::string::npos)
      << r.output;
}

// The plan run for real on two ranks, and the one-process reference.
TEST(PipelinePlan, BenchRunsThePlanOnRanksAndComparesWithTheSimulation) {
  TempDir dir;
  const auto two =
      run_loom("launch --nproc-per-node 2 -- " + std::string(LOOM_BINARY) + " bench pipeline " +
               tiny_synthetic_args() + " --steps 3 --json " + (dir / "two.json"));
  ASSERT_EQ(two.exit_code, 0) << two.output;
  EXPECT_NE(two.output.find("cnn, 2 ranks, 4 micro-batches of 4 samples"), std::string::npos)
      << two.output;
  EXPECT_NE(two.output.find("measured / simulated"), std::string::npos) << two.output;
  EXPECT_NE(two.output.find("rank 1: peak tensor memory"), std::string::npos) << two.output;
  const auto json = nlohmann::json::parse(read_text(dir / "two.json"));
  EXPECT_GT(json.at("measured_step_seconds").get<double>(), 0);
  EXPECT_GT(json.at("simulated_step_seconds").get<double>(), 0);
  EXPECT_EQ(json.at("peak_memory_mb").size(), 2u);
  const auto one = run_loom("bench pipeline " + tiny_synthetic_args() + " --steps 3");
  ASSERT_EQ(one.exit_code, 0) << one.output;
  EXPECT_NE(one.output.find("cnn, 1 rank, 4 micro-batches"), std::string::npos) << one.output;
}

}  // namespace
}  // namespace loom::test
