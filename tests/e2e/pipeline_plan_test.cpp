// `loom pipeline plan` as a user runs it: a real model profiled block by block, partitioned,
// its schedule simulated and written out; impossible plans are configuration errors that say
// what would work.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>

#include "e2e/json_output.h"
#include "tools/test_support.h"

namespace loom::test {
namespace {

std::string resnet_args() {
  return tiny_synthetic_args() + " --set model=resnet18 --set data.image_size=32";
}

TEST(PipelinePlan, ProfilesPartitionsAndSimulates) {
  TempDir dir;
  const auto r = run_loom("pipeline plan --json " + resnet_args() +
                          " --set parallel.pipeline.stages=2 --set parallel.pipeline.microbatches=4"
                          " --trace " +
                          (dir / "plan.json") + " --csv " + (dir / "plan.csv"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto plan = json_line(r.output);
  EXPECT_EQ(plan["schedule"], "1f1b");
  EXPECT_EQ(plan["ranks"], 2);
  EXPECT_EQ(plan["chunks"], 1);
  EXPECT_EQ(plan["microbatches"], 4);
  EXPECT_EQ(plan["microbatch_samples"], 4);  // data.batch_size 16 over 4 micro-batches
  EXPECT_EQ(plan["model"], "resnet18");
  ASSERT_EQ(plan["blocks"].size(), 10u) << plan["blocks"];
  EXPECT_EQ(plan["partition"], "automatic");
  // Two stages, one per rank, that cover the blocks in order; the last ends with the head.
  const auto& stages = plan["stages"];
  ASSERT_EQ(stages.size(), 2u) << plan.dump(2);
  int covered = 0;
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(stages[i]["rank"], i);
    EXPECT_EQ(stages[i]["first_block"], plan["blocks"][covered]);
    EXPECT_GE(stages[i]["blocks"].get<int>(), 1);
    EXPECT_EQ(plan["split"][i], stages[i]["blocks"]);
    covered += stages[i]["blocks"].get<int>();
    EXPECT_GT(stages[i]["forward_seconds"].get<double>(), 0);
    EXPECT_GT(stages[i]["memory_bytes"].get<double>(), 0);
  }
  EXPECT_EQ(covered, 10);
  EXPECT_EQ(stages[1]["last_block"], "head");
  EXPECT_GT(plan["simulated_step_seconds"].get<double>(), 0);
  EXPECT_GE(plan["bubble"].get<double>(), 0);
  EXPECT_LT(plan["bubble"].get<double>(), 1);

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
  const auto again = run_loom("pipeline plan --json " + resnet_args() +
                              " --set parallel.pipeline.stages=2 --set "
                              "parallel.pipeline.microbatches=4 --set parallel.pipeline.schedule=" +
                              (dir / "plan.csv"));
  ASSERT_EQ(again.exit_code, 0) << again.output;
  const auto replanned = json_line(again.output);
  EXPECT_EQ(replanned["schedule"], dir / "plan.csv");
  EXPECT_EQ(replanned["ranks"], 2);
  EXPECT_EQ(replanned["microbatches"], 4);
  EXPECT_EQ(replanned["blocks"], plan["blocks"]);
}

TEST(PipelinePlan, ManualSplitAndInterleaving) {
  const auto r = run_loom("pipeline plan --json " + resnet_args() +
                          " --set parallel.pipeline.stages=2 --set parallel.pipeline.chunks=2"
                          " --set parallel.pipeline.schedule=interleaved"
                          " --set parallel.pipeline.split=1,3,3,3");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto plan = json_line(r.output);
  EXPECT_EQ(plan["schedule"], "interleaved");
  EXPECT_EQ(plan["chunks"], 2);
  EXPECT_EQ(plan["partition"], "parallel.pipeline.split");
  EXPECT_EQ(plan["split"], nlohmann::json::array({1, 3, 3, 3}));
  // Interleaved: stages go round the ranks, so rank 0 runs stages 0 and 2.
  const auto& stages = plan["stages"];
  ASSERT_EQ(stages.size(), 4u) << plan.dump(2);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(stages[i]["rank"], i % 2) << "stage " << i;
  EXPECT_EQ(stages[2]["blocks"], 3);
}

// Two micro-batches on two stages leave a third of the step idle: the plan says how many would
// shrink that, from the same profile. ViT's equal encoder blocks split evenly, so the bubble is
// the schedule's own (P-1)/(M+P-1) and shrinks with M whatever the timings.
TEST(PipelinePlan, LargeBubbleSuggestsMoreMicroBatches) {
  const auto r =
      run_loom("pipeline plan --json " + tiny_synthetic_args() +
               " --set model=vit_tiny --set data.image_size=32 --set model.patch_size=8"
               " --set parallel.pipeline.stages=2 --set parallel.pipeline.microbatches=2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto plan = json_line(r.output);
  const auto& better = plan["better_microbatches"];
  ASSERT_TRUE(better.is_object()) << plan.dump(2);
  // 2x or 4x the micro-batches, of a batch of 16 that divides into them, with a smaller bubble.
  EXPECT_TRUE(better["microbatches"] == 4 || better["microbatches"] == 8) << better;
  EXPECT_LT(better["bubble"].get<double>(), plan["bubble"].get<double>()) << plan.dump(2);
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
      run_loom("launch --nproc-per-node 2 -- " + test::loom_binary() + " bench pipeline " +
               tiny_synthetic_args() + " --steps 3 --json " + (dir / "two.json"));
  ASSERT_EQ(two.exit_code, 0) << two.output;
  const auto json = json_file(dir / "two.json");
  EXPECT_EQ(json.at("model"), "cnn");
  EXPECT_EQ(json.at("ranks"), 2);
  EXPECT_EQ(json.at("microbatches"), 4);
  EXPECT_EQ(json.at("samples_per_step"), 16);  // 4 micro-batches of 4 samples
  EXPECT_GT(json.at("measured_step_seconds").get<double>(), 0);
  EXPECT_GT(json.at("simulated_step_seconds").get<double>(), 0);
  ASSERT_EQ(json.at("peak_memory_mb").size(), 2u);
  for (const auto& mb : json.at("peak_memory_mb")) EXPECT_GT(mb.get<double>(), 0) << json.dump(2);
  const auto one = run_loom("bench pipeline " + tiny_synthetic_args() + " --steps 3 --json " +
                            (dir / "one.json"));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const auto alone = json_file(dir / "one.json");
  EXPECT_EQ(alone.at("model"), "cnn");
  EXPECT_EQ(alone.at("ranks"), 1);
  EXPECT_EQ(alone.at("microbatches"), 4);
  EXPECT_GT(alone.at("measured_step_seconds").get<double>(), 0);
}

}  // namespace
}  // namespace loom::test
