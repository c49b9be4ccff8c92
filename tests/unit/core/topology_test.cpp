#include "loom/core/topology.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <fstream>

namespace loom {
namespace {

TEST(Topology, ParsesCgroupCpuMax) {
  EXPECT_FALSE(parse_cgroup_cpu_max("max 100000\n").has_value());
  EXPECT_DOUBLE_EQ(*parse_cgroup_cpu_max("150000 100000\n"), 1.5);
  EXPECT_DOUBLE_EQ(*parse_cgroup_cpu_max("200000 100000"), 2.0);
  EXPECT_FALSE(parse_cgroup_cpu_max("garbage").has_value());
}

TEST(Topology, UsableCoresIsTheTighterOfAffinityAndQuota) {
  EXPECT_EQ(usable_cores(8, std::nullopt), 8);
  EXPECT_EQ(usable_cores(8, 1.5), 2);  // a quota of 1.5 cores still runs two threads usefully
  EXPECT_EQ(usable_cores(2, 4.0), 2);
  EXPECT_EQ(usable_cores(4, 0.5), 1);
  EXPECT_EQ(usable_cores(0, std::nullopt), 1);
}

TEST(Topology, FollowsTheAffinityMask) {
  cpu_set_t original;
  ASSERT_EQ(sched_getaffinity(0, sizeof(original), &original), 0);
  Topology full = detect_topology();
  EXPECT_GE(full.usable_cores, 1);
  EXPECT_LE(full.usable_cores, full.online_cores);
  EXPECT_EQ(full.affinity_cores, CPU_COUNT(&original));

  // Pin to one core: the usable count must follow, whatever LibTorch would default to.
  int first = 0;
  while (!CPU_ISSET(first, &original)) ++first;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
  Topology pinned = detect_topology();
  sched_setaffinity(0, sizeof(original), &original);
  EXPECT_EQ(pinned.affinity_cores, 1);
  EXPECT_EQ(pinned.usable_cores, 1);
}

// The kernel's view of the CPU flags is the reference for our CPUID reading.
std::string cpuinfo_flags() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("flags", 0) == 0) return line + " ";
  }
  return "";
}

TEST(Topology, CpuFeaturesMatchTheKernelFlags) {
  const std::string flags = cpuinfo_flags();
  if (flags.empty()) GTEST_SKIP() << "/proc/cpuinfo has no flags line on this machine";
  Topology t = detect_topology();
  EXPECT_EQ(t.cpu.avx512_bf16, flags.find(" avx512_bf16 ") != std::string::npos);
  EXPECT_EQ(t.cpu.amx_bf16, flags.find(" amx_bf16 ") != std::string::npos);
  EXPECT_EQ(t.cpu.avx512f, flags.find(" avx512f ") != std::string::npos);
  EXPECT_EQ(t.cpu.avx2, flags.find(" avx2 ") != std::string::npos);
}

TEST(Topology, Bf16FeaturesImplyAvx512) {
  Topology t = detect_topology();
  if (t.cpu.avx512_bf16) {
    EXPECT_TRUE(t.cpu.avx512f);
  }
  EXPECT_EQ(t.cpu.native_bf16(), t.cpu.avx512_bf16 || t.cpu.amx_bf16);
  EXPECT_NE(describe(t).find("usable cores"), std::string::npos);
}

}  // namespace
}  // namespace loom
