#include "loom/profile/cost_planner.h"

#include <gtest/gtest.h>

#include "loom/core/error.h"

namespace loom::profile {
namespace {

const char* kPrices = R"(
instances:
  - {name: cpu8, vcpus: 8, price_per_hour: 0.4, spot_price_per_hour: 0.1}
  - {name: gpu, vcpus: 8, gpus: 1, price_per_hour: 1.2}
  - {name: gpu-measured, vcpus: 4, gpus: 1, price_per_hour: 2.0, samples_per_second: 100}
)";

TEST(CostPlanner, ParsesPricesAndNamesBadEntries) {
  const auto prices = parse_prices(kPrices, "p.yaml");
  ASSERT_EQ(prices.size(), 3u);
  EXPECT_EQ(prices[0].name, "cpu8");
  EXPECT_EQ(prices[0].vcpus, 8);
  EXPECT_DOUBLE_EQ(prices[0].spot_price_per_hour, 0.1);
  EXPECT_EQ(prices[2].gpus, 1);
  try {
    parse_prices(
        "instances:\n  - {name: a, vcpus: 2, price_per_hour: 1}\n  - {name: b, vcpus: 2}\n",
        "p.yaml");
    FAIL() << "a missing price was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("instances[1].price_per_hour"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(parse_prices("instances: []", "p.yaml"), ConfigError);
  EXPECT_THROW(parse_prices("instances:\n  - {name: a, vcpus: x, price_per_hour: 1}\n", "p.yaml"),
               ConfigError);
}

TEST(CostPlanner, EstimatesAndPricesPerInstance) {
  RunMeasurement run{50.0, 2, 0.0, 0.01};
  const auto estimates = estimate_instances(run, parse_prices(kPrices, "p.yaml"));
  // cpu8: 50 samples/s on 2 cores -> 200 on 8 vCPUs.
  ASSERT_TRUE(estimates[0].samples_per_second);
  EXPECT_DOUBLE_EQ(*estimates[0].samples_per_second, 200.0);
  EXPECT_DOUBLE_EQ(estimates[0].samples_per_dollar(), 3600 * 200.0 / 0.4);
  EXPECT_DOUBLE_EQ(estimates[0].hours_for(7.2e6), 10.0);
  EXPECT_DOUBLE_EQ(estimates[0].cost_for(7.2e6), 4.0);
  EXPECT_DOUBLE_EQ(estimates[0].spot_cost_for(7.2e6), 1.0);
  EXPECT_FALSE(estimates[1].samples_per_second);  // an accelerator without a measured rate
  ASSERT_TRUE(estimates[2].samples_per_second);
  EXPECT_DOUBLE_EQ(*estimates[2].samples_per_second, 100.0);
  EXPECT_EQ(estimates[2].basis, "measured");
}

TEST(CostPlanner, HeterogeneousWhatIfFindsTheBreakEven) {
  // The measured trainer gets 100 samples/s but waits for data half of each step: the model
  // could take 200. The pipeline costs 10 ms of CPU per sample: an 8-vCPU instance supplies 800.
  RunMeasurement run{100.0, 4, 0.5, 0.01};
  const auto estimates = estimate_instances(run, parse_prices(kPrices, "p.yaml"));
  const auto w = heterogeneous_what_if(run, estimates[2], estimates[0].instance);
  EXPECT_DOUBLE_EQ(w.model_rate, 200.0);
  EXPECT_DOUBLE_EQ(w.local_input_rate, 100.0);
  EXPECT_DOUBLE_EQ(w.per_instance_rate, 800.0);
  EXPECT_EQ(w.break_even, 1);
  ASSERT_EQ(w.rows.size(), 3u);
  EXPECT_DOUBLE_EQ(w.rows[0].samples_per_second, 100.0);
  EXPECT_DOUBLE_EQ(w.rows[1].samples_per_second, 200.0);
  EXPECT_DOUBLE_EQ(w.rows[2].samples_per_second, 200.0);
  EXPECT_DOUBLE_EQ(w.rows[1].price_per_hour, 2.4);
  EXPECT_DOUBLE_EQ(w.rows[1].samples_per_dollar(), 3600 * 200.0 / 2.4);
  // Spot: the trainer has no spot price (on demand), the worker's is 0.1.
  EXPECT_DOUBLE_EQ(w.rows[1].spot_price_per_hour, 2.1);
  EXPECT_EQ(w.best_value, 1);  // 300000 samples/$ beats 180000 (k=0) and 276923 (k=2)
}

TEST(CostPlanner, ACpuTrainerSharesItsCoresBetweenTrainingBuildingAndReceiving) {
  // 100 samples/s on one core, half of each step waiting: the model could take 200. Per sample
  // the core spends 2 ms training, 8 ms building, and would spend 1 ms receiving.
  RunMeasurement run{100.0, 1, 0.5, 0.008};
  run.cpu_budget = 1.0;
  run.train_cpu_seconds_per_sample = 0.002;
  run.receive_cpu_seconds_per_sample = 0.001;
  InstanceType host{"host", 1, 0, 0.1, 0, 0};
  InstanceType one_core{"core", 1, 0, 0.05, 0, 0};  // supplies 1 / 8 ms = 125 samples/s
  const auto trainer = estimate_instances(run, {host})[0];
  const auto w = heterogeneous_what_if(run, trainer, one_core);
  EXPECT_TRUE(w.shared_cores);
  EXPECT_DOUBLE_EQ(w.rows[0].samples_per_second, 100.0);  // the measured run itself
  // 125 received cost 125 x 3 ms of the core; the 0.625 s left build 62.5 more locally.
  EXPECT_DOUBLE_EQ(w.rows[1].samples_per_second, 187.5);
  // Two cores' worth would feed the model (200) and leave nothing to build locally.
  EXPECT_DOUBLE_EQ(w.rows[2].samples_per_second, 200.0);
  EXPECT_EQ(w.break_even, 2);
  // Receiving dearer than the model's appetite allows: the trainer's core caps the rate at
  // 1 / (2 + 4 ms), however many workers come.
  run.receive_cpu_seconds_per_sample = 0.004;
  const auto capped = heterogeneous_what_if(run, trainer, one_core);
  EXPECT_NEAR(capped.rows.back().samples_per_second, 1 / 0.006, 1e-9);
  // Without the run's CPU costs, the simpler model: local supply stays as measured.
  run.cpu_budget = 0;
  const auto simple = heterogeneous_what_if(run, trainer, one_core);
  EXPECT_FALSE(simple.shared_cores);
  EXPECT_DOUBLE_EQ(simple.rows[1].samples_per_second, 200.0);  // min(200, 100 + 125)
}

TEST(CostPlanner, ComputeBoundRunNeedsNoHelpers) {
  RunMeasurement run{100.0, 4, 0.0, 0.01};
  const auto estimates = estimate_instances(run, parse_prices(kPrices, "p.yaml"));
  const auto w = heterogeneous_what_if(run, estimates[2], estimates[0].instance);
  EXPECT_EQ(w.break_even, 0);
  EXPECT_EQ(w.best_value, 0);
  EXPECT_DOUBLE_EQ(w.rows[1].samples_per_second, 100.0);
  EXPECT_THROW(heterogeneous_what_if(run, estimates[1], estimates[0].instance), ConfigError);
}

}  // namespace
}  // namespace loom::profile
