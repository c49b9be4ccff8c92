#include "loom/parallel/layout_plan.h"

#include <gtest/gtest.h>

#include "loom/core/error.h"

namespace loom::parallel {
namespace {

Config config_of(const std::vector<std::string>& overrides) {
  return parse_config("", "test", overrides);
}

std::string error_of(const std::vector<std::string>& overrides, int world) {
  try {
    plan_layout(config_of(overrides), world, 0);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(LayoutPlan, OneProcessReadsItsBatchGradAccumTimes) {
  const LayoutPlan plan =
      plan_layout(config_of({"data.batch_size=16", "train.grad_accum=3"}), 1, 0);
  EXPECT_EQ(plan.mesh.describe(), "data 1");
  EXPECT_FALSE(plan.servers || plan.pipeline || plan.tensor);
  EXPECT_EQ(plan.step.micro_batch, 16);
  EXPECT_EQ(plan.step.micro_batches, 3);
  EXPECT_EQ(plan.step.replica_batch, 48);
  EXPECT_EQ(plan.step.global_batch, 48);
  EXPECT_EQ(plan.data.replicas, 1);
  EXPECT_TRUE(plan.lockstep());
}

TEST(LayoutPlan, DataParallelRanksShareTheGlobalBatchAndScaleTheRate) {
  const LayoutPlan plan = plan_layout(
      config_of({"data.global_batch=64", "data.batch_size=7", "optimizer.lr_scaling=linear"}), 4,
      2);
  EXPECT_EQ(plan.mesh.describe(), "data 4");
  EXPECT_EQ(plan.step.micro_batch, 16);  // data.batch_size is not what the ranks read
  EXPECT_EQ(plan.step.global_batch, 64);
  EXPECT_EQ(plan.data.replicas, 4);
  EXPECT_EQ(plan.data.replica, 2);
  EXPECT_EQ(plan.data.lr_scale, 4);
  // Without data.global_batch each rank reads data.batch_size.
  const LayoutPlan own = plan_layout(config_of({"data.batch_size=7"}), 2, 1);
  EXPECT_EQ(own.step.micro_batch, 7);
  EXPECT_EQ(own.step.global_batch, 14);
  EXPECT_EQ(own.data.lr_scale, 1);
  EXPECT_NE(error_of({"data.global_batch=10"}, 4).find("config key 'data.global_batch'"),
            std::string::npos);
}

TEST(LayoutPlan, TheLastRanksServe) {
  const Config ssp = config_of({"parallel.mode=ps", "parallel.ps.servers=2", "parallel.ps.mode=ssp",
                                "parallel.ps.staleness=3", "data.global_batch=30"});
  const LayoutPlan worker = plan_layout(ssp, 5, 1), server = plan_layout(ssp, 5, 4);
  ASSERT_TRUE(worker.servers.has_value());
  EXPECT_EQ(worker.servers->servers, 2);
  EXPECT_EQ(worker.trainers, 3);
  EXPECT_EQ(worker.step.micro_batch, 10);  // the global batch is the workers'
  EXPECT_FALSE(worker.serves());
  EXPECT_TRUE(server.serves());
  // The servers are outside the training ranks' mesh.
  EXPECT_EQ(server.mesh.describe(), "data 3");
  EXPECT_EQ(worker.data.replica, 1);
  EXPECT_EQ(server.data.replica, 0);
  EXPECT_EQ(worker.servers->mode, PsMode::kSsp);
  EXPECT_EQ(worker.servers->staleness, 3);
  EXPECT_TRUE(worker.servers_hold_parameters());
  EXPECT_FALSE(worker.lockstep());
  const LayoutPlan sync = plan_layout(config_of({"parallel.mode=ps"}), 3, 0);
  EXPECT_FALSE(sync.servers_hold_parameters());
  EXPECT_TRUE(sync.lockstep());
  EXPECT_NE(error_of({"parallel.mode=ps"}, 1).find("config key 'parallel.mode'"),
            std::string::npos);
  EXPECT_NE(error_of({"parallel.mode=ps", "parallel.ps.servers=4"}, 4)
                .find("config key 'parallel.ps.servers'"),
            std::string::npos);
}

TEST(LayoutPlan, TensorGroupsAreTheInnermostDimension) {
  const Config tensor = config_of({"model.name=gpt", "parallel.tensor=2", "data.global_batch=64"});
  const LayoutPlan plan = plan_layout(tensor, 4, 3);  // 2 replicas of a tensor group of 2
  EXPECT_EQ(plan.data.replicas, 2);
  EXPECT_EQ(plan.data.replica, 1);
  ASSERT_TRUE(plan.tensor.has_value());
  EXPECT_EQ(plan.tensor->rank, 1);
  // A tensor group's ranks are neighbours (one host, shared memory): ranks 2 and 3.
  EXPECT_EQ(plan.mesh.group(plan.rank, kTensorDim), (std::vector<int>{2, 3}));
  EXPECT_EQ(plan.mesh.group(plan.rank, kDataDim), (std::vector<int>{1, 3}));
  EXPECT_EQ(plan.step.replica_batch, 32);
  EXPECT_NE(plan.describe().find("tensor parallel over 2 ranks, data parallel over 2 such groups"),
            std::string::npos)
      << plan.describe();
  EXPECT_NE(plan.describe().find("mesh data 2 x tensor 2"), std::string::npos) << plan.describe();
  EXPECT_NE(error_of({"model.name=gpt", "parallel.tensor=2"}, 3).find("parallel.tensor"),
            std::string::npos);
}

TEST(LayoutPlan, PipelinesSplitTheirStepIntoMicroBatches) {
  const Config two = config_of(
      {"parallel.pipeline.stages=2", "parallel.pipeline.microbatches=4", "data.global_batch=64"});
  const LayoutPlan plan = plan_layout(two, 4, 3);  // 2 pipelines of 2 stages
  ASSERT_TRUE(plan.pipeline.has_value());
  EXPECT_EQ(plan.data.replicas, 2);
  EXPECT_EQ(plan.data.replica, 1);
  EXPECT_EQ(plan.pipeline->rank, 1);
  // A pipeline's ranks are neighbours in the mesh: ranks 2 and 3 run the second one.
  EXPECT_EQ(plan.mesh.describe(), "data 2 x pipeline 2");
  EXPECT_EQ(plan.mesh.group(plan.rank, kPipelineDim), (std::vector<int>{2, 3}));
  EXPECT_EQ(plan.step.replica_batch, 32);
  EXPECT_EQ(plan.step.micro_batch, 8);
  EXPECT_EQ(plan.step.micro_batches, 4);
  EXPECT_STREQ(plan.micro_batches_key(), "parallel.pipeline.microbatches");
  EXPECT_NE(error_of({"parallel.pipeline.stages=2"}, 3).find("parallel.pipeline.stages"),
            std::string::npos);
  EXPECT_NE(error_of({"parallel.pipeline.stages=2", "train.grad_accum=2"}, 2)
                .find("config key 'train.grad_accum'"),
            std::string::npos);
  EXPECT_NE(error_of({"parallel.pipeline.stages=2", "parallel.pipeline.microbatches=5",
                      "data.batch_size=32"},
                     2)
                .find("parallel.pipeline.microbatches"),
            std::string::npos);
}

TEST(LayoutPlan, AScriptsPipelineTakesItsShapeFromTheScript) {
  const LayoutPlan plan = plan_script_pipeline(6, 4, 3, 6);  // 2 pipelines of 3 ranks
  ASSERT_TRUE(plan.pipeline.has_value());
  EXPECT_EQ(plan.mesh.describe(), "data 2 x pipeline 3");
  EXPECT_EQ(plan.trainers, 6);
  EXPECT_EQ(plan.data.replicas, 2);
  EXPECT_EQ(plan.data.replica, 1);
  EXPECT_EQ(plan.pipeline->rank, 1);
  EXPECT_EQ(plan.step.micro_batches, 6);
  EXPECT_EQ(plan.step.global_batch, 0);  // the script's to choose, step by step
  const auto error = [](int trainers, int ranks, int64_t microbatches) {
    try {
      plan_script_pipeline(trainers, 0, ranks, microbatches);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(error(4, 3, 4).rfind("pipeline_ranks:", 0), 0u);
  EXPECT_EQ(error(1, 1, 4).rfind("pipeline_ranks:", 0), 0u);
  EXPECT_EQ(error(2, 2, 0).rfind("microbatches:", 0), 0u);
}

// Each dimension says its part, innermost first: what one replica is, then the replicas.
TEST(LayoutPlan, DescribesItselfADimensionAtATime) {
  const auto words = [](const std::vector<std::string>& overrides, int world) {
    return plan_layout(config_of(overrides), world, 0).describe();
  };
  EXPECT_EQ(words({"data.global_batch=64"}, 2),
            "data parallel over 2 ranks: 64 samples a step, 32 a replica (1 x 32)");
  EXPECT_EQ(words({"data.global_batch=64", "parallel.zero=1", "model.name=gpt", "parallel.tensor=2",
                   "parallel.pipeline.stages=2"},
                  8),
            "a pipeline of 2 stages, each tensor parallel over 2 ranks, data parallel over 2 "
            "such groups (optimizer state sharded, ZeRO-1): 64 samples a step, 32 a replica "
            "(4 x 8); mesh data 2 x pipeline 2 x tensor 2");
  EXPECT_EQ(words({"parallel.mode=ps", "data.batch_size=8"}, 3),
            "2 workers and 1 sync parameter servers: 16 samples a step, 8 a replica (1 x 8)");
}

}  // namespace
}  // namespace loom::parallel
