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
