// `loom plan` on a real run: a price table per instance type and the CPU-preprocessing
// what-if; bad input is a configuration error that names what is wrong.
#include <gtest/gtest.h>

#include <algorithm>

#include "e2e/json_output.h"
#include "tools/run_compare.h"
#include "tools/test_support.h"

namespace loom::test {
namespace {

TEST(Plan, PricesARunPerInstanceTypeWithTheWhatIf) {
  TempDir dir;
  const auto trained =
      run_loom("train " + tiny_synthetic_args() + " --set train.epochs=1 --out " + (dir / "run"));
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  const std::string args = "plan " + (dir / "run") + " --prices " + test::source_dir() +
                           "/examples/prices.yaml --samples 1e6";
  const auto table = run_loom(args);  // for people; the numbers are read from --json
  EXPECT_EQ(table.exit_code, 0) << table.output;
  const auto plan = run_loom(args + " --json");
  ASSERT_EQ(plan.exit_code, 0) << plan.output;
  const auto costs = json_line(plan.output)["costs"];
  const auto run = summary_of(dir / "run");
  EXPECT_DOUBLE_EQ(costs["run"]["samples_per_second"].get<double>(),
                   run["samples_per_second"].get<double>());
  const int cores = run["machine"]["usable_cores"];
  EXPECT_EQ(costs["run"]["usable_cores"], cores);
  EXPECT_EQ(costs["samples"], 1e6);
  // Every type of examples/prices.yaml, in order: the CPU ones scaled from the run by vCPUs,
  // the GPU ones (a CPU run cannot predict them) not estimated.
  const auto& instances = costs["instances"];
  ASSERT_EQ(instances.size(), 4u) << costs.dump(2);
  EXPECT_EQ(instances[0]["name"], "c7i.2xlarge");
  for (const auto& i : instances) {
    if (i["gpus"].get<int>() > 0) {
      EXPECT_TRUE(i["samples_per_second"].is_null()) << i;
      continue;
    }
    const double rate = run["samples_per_second"].get<double>() * i["vcpus"].get<int>() / cores;
    EXPECT_NEAR(i["samples_per_second"].get<double>(), rate, 1e-9 * rate) << i;
    EXPECT_NEAR(i["samples_per_dollar"].get<double>(),
                3600 * rate / i["price_per_hour"].get<double>(), 1e-6 * rate)
        << i;
    EXPECT_NEAR(i["hours"].get<double>(), 1e6 / rate / 3600, 1e-9 * 1e6 / rate) << i;
  }
  EXPECT_EQ(std::count_if(instances.begin(), instances.end(),
                          [](const auto& i) { return i["samples_per_second"].is_null(); }),
            2);
  // The what-if: a break-even count of CPU instances, and a row for each k up to one past it.
  const auto& what_if = costs["what_if"];
  ASSERT_TRUE(what_if.is_object()) << costs.dump(2);
  const int break_even = what_if["break_even"];
  EXPECT_GE(break_even, 0);
  ASSERT_EQ(what_if["rows"].size(), static_cast<size_t>(break_even + 2)) << what_if.dump(2);
  for (int k = 0; k < break_even + 2; ++k) {
    EXPECT_EQ(what_if["rows"][k]["cpu_instances"], k);
    EXPECT_GT(what_if["rows"][k]["samples_per_dollar"].get<double>(), 0) << what_if["rows"][k];
  }
}

// From a one-process run: M is the model's parameters as fp32, the link is given, and the
// arithmetic is shown; without a link the run measured none, which is a configuration error.
TEST(Plan, SaysWhetherTheRingOrServersExchangeFaster) {
  TempDir dir;
  const auto trained = run_loom("train " + tiny_synthetic_args() +
                                " --set train.max_steps=2 --out " + (dir / "run"));
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  const std::string args = "plan " + (dir / "run") + " --workers 4 --servers 2,4 --link-gbit 1";
  const auto table = run_loom(args);  // for people; the numbers are read from --json
  EXPECT_EQ(table.exit_code, 0) << table.output;
  const auto plan = run_loom(args + " --json");
  ASSERT_EQ(plan.exit_code, 0) << plan.output;
  const auto exchange = json_line(plan.output)["exchange"];
  // M: the model's parameters as fp32 (one process measured no exchange); B: 1 Gbit/s.
  const double m = 4.0 * summary_of(dir / "run")["parameters"].get<double>(), b = 1e9 / 8;
  EXPECT_DOUBLE_EQ(exchange["gradient_bytes"].get<double>(), m);
  EXPECT_DOUBLE_EQ(exchange["link_bytes_per_second"].get<double>(), b);
  EXPECT_EQ(exchange["workers"], 4);
  // The ring: 2(n-1)/n*M/B; k servers: max(M/B, n*M/(k*B)).
  EXPECT_NEAR(exchange["ring_seconds"].get<double>(), 2.0 * 3 / 4 * m / b, 1e-12);
  ASSERT_EQ(exchange["options"].size(), 2u) << exchange.dump(2);
  EXPECT_EQ(exchange["options"][0]["servers"], 2);
  EXPECT_NEAR(exchange["options"][0]["seconds"].get<double>(), std::max(m / b, 4 * m / (2 * b)),
              1e-12);
  EXPECT_EQ(exchange["options"][1]["servers"], 4);
  EXPECT_NEAR(exchange["options"][1]["seconds"].get<double>(), std::max(m / b, 4 * m / (4 * b)),
              1e-12);
  // Four servers: 1.50x faster than the ring.
  EXPECT_EQ(exchange["best_servers"], 4);
  EXPECT_EQ(exchange["choice"], "parameter_servers");
  EXPECT_NEAR(
      exchange["ring_seconds"].get<double>() / exchange["options"][1]["seconds"].get<double>(), 1.5,
      1e-9);
  // Two workers: servers can at best tie, so the ring.
  const auto two = run_loom("plan " + (dir / "run") + " --workers 2 --link-gbit 1 --json");
  ASSERT_EQ(two.exit_code, 0) << two.output;
  EXPECT_EQ(json_line(two.output)["exchange"]["best_servers"], 0);
  EXPECT_EQ(json_line(two.output)["exchange"]["choice"], "ring");
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
