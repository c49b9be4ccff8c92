// `loom plan` on a real run: a price table per instance type and the CPU-preprocessing
// what-if; bad input is a configuration error that names what is wrong.
#include <gtest/gtest.h>

#include "tools/test_support.h"

namespace loom::test {
namespace {

TEST(Plan, PricesARunPerInstanceTypeWithTheWhatIf) {
  TempDir dir;
  const auto trained =
      run_loom("train " + tiny_synthetic_args() + " --set train.epochs=1 --out " + (dir / "run"));
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  const auto plan = run_loom("plan " + (dir / "run") + " --prices " + std::string(LOOM_SOURCE_DIR) +
                             "/examples/prices.yaml --samples 1e6");
  ASSERT_EQ(plan.exit_code, 0) << plan.output;
  EXPECT_NE(plan.output.find("c7i.2xlarge"), std::string::npos) << plan.output;
  EXPECT_NE(plan.output.find("scaled by vCPUs"), std::string::npos) << plan.output;
  EXPECT_NE(plan.output.find("not estimated"), std::string::npos) << plan.output;  // GPU types
  EXPECT_NE(plan.output.find("break-even: k ="), std::string::npos) << plan.output;
  EXPECT_NE(plan.output.find("samples/$"), std::string::npos) << plan.output;
}

// From a one-process run: M is the model's parameters as fp32, the link is given, and the
// arithmetic is shown; without a link the run measured none, which is a configuration error.
TEST(Plan, SaysWhetherTheRingOrServersExchangeFaster) {
  TempDir dir;
  const auto trained = run_loom("train " + tiny_synthetic_args() +
                                " --set train.max_steps=2 --out " + (dir / "run"));
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  const auto plan = run_loom("plan " + (dir / "run") + " --workers 4 --servers 2,4 --link-gbit 1");
  ASSERT_EQ(plan.exit_code, 0) << plan.output;
  EXPECT_NE(plan.output.find("the model's parameters as fp32"), std::string::npos) << plan.output;
  EXPECT_NE(plan.output.find("ring all-reduce: 2(n-1)/n*M/B = 2*3/4*"), std::string::npos)
      << plan.output;
  EXPECT_NE(plan.output.find("2 servers: max(M/B, n*M/(k*B))"), std::string::npos) << plan.output;
  EXPECT_NE(plan.output.find("choose 4 servers: 1.50x faster than the ring"), std::string::npos)
      << plan.output;
  const auto two = run_loom("plan " + (dir / "run") + " --workers 2 --link-gbit 1");
  EXPECT_NE(two.output.find("choose ring all-reduce"), std::string::npos) << two.output;
  const auto no_link = run_loom("plan " + (dir / "run") + " --workers 4");
  EXPECT_EQ(no_link.exit_code, 2) << no_link.output;
  EXPECT_NE(no_link.output.find("--link-gbit"), std::string::npos) << no_link.output;
}

TEST(Plan, BadPricesAndRunsAreConfigErrors) {
  TempDir dir;
  write_text(dir / "prices.yaml", "instances:\n  - {name: a, vcpus: 4}\n");
  const auto trained = run_loom("train " + tiny_synthetic_args() +
                                " --set train.max_steps=2 --out " + (dir / "run"));
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  const auto bad_prices = run_loom("plan " + (dir / "run") + " --prices " + (dir / "prices.yaml"));
  EXPECT_EQ(bad_prices.exit_code, 2) << bad_prices.output;
  EXPECT_NE(bad_prices.output.find("instances[0].price_per_hour"), std::string::npos)
      << bad_prices.output;
  const auto no_run = run_loom("plan " + (dir / "absent") + " --prices " + (dir / "prices.yaml"));
  EXPECT_EQ(no_run.exit_code, 2) << no_run.output;
  EXPECT_NE(no_run.output.find("summary.json"), std::string::npos) << no_run.output;
}

}  // namespace
}  // namespace loom::test
