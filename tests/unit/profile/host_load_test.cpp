#include "loom/profile/host_load.h"

#include <gtest/gtest.h>

namespace loom::profile {
namespace {

constexpr const char* kProcStat =
    "cpu  300 6 60 900 9 3 3 30 7 0\n"
    "cpu0 100 2 20 300 3 1 1 10 7 0\n"
    "cpu1 200 4 40 600 6 2 2 20 0 0\n"
    "intr 12345 0 0\n"
    "ctxt 999\n";

TEST(HostLoad, ParsesTheBusyAndStolenTimeOfTheListedCores) {
  // cpu1 at 100 ticks a second: user + nice + system + irq + softirq = 248 ticks; steal 20.
  const auto one = parse_proc_stat(kProcStat, {1}, 100);
  ASSERT_TRUE(one.has_value());
  EXPECT_DOUBLE_EQ(one->busy_seconds, 2.48);
  EXPECT_DOUBLE_EQ(one->steal_seconds, 0.20);
  // Both cores; the "cpu" summary line is not counted again, nor is guest time (in user).
  const auto both = parse_proc_stat(kProcStat, {0, 1}, 100);
  ASSERT_TRUE(both.has_value());
  EXPECT_DOUBLE_EQ(both->busy_seconds, 3.72);
  EXPECT_DOUBLE_EQ(both->steal_seconds, 0.30);
  // A core without a line: unknown rather than undercounted.
  EXPECT_FALSE(parse_proc_stat(kProcStat, {0, 2}, 100).has_value());
  EXPECT_FALSE(parse_proc_stat(kProcStat, {}, 100).has_value());
}

TEST(HostLoad, MeasuresNothingBeforeItStarts) {
  HostLoad load;
  EXPECT_FALSE(load.started());
  EXPECT_FALSE(load.share().has_value());
  load.start();
  if (!load.started()) GTEST_SKIP() << "no /proc/stat here";
  EXPECT_TRUE(load.started());
}

}  // namespace
}  // namespace loom::profile
