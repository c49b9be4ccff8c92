#include "loom/core/cpu_capability.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "loom/core/error.h"

namespace loom {
namespace {

TEST(CpuCapability, ParsesTheThreeNamesAndNamesTheKeyOtherwise) {
  for (auto c : {CpuCapability::kAvx512, CpuCapability::kAvx2, CpuCapability::kDefault}) {
    EXPECT_EQ(parse_cpu_capability(to_string(c), "KEY"), c);
  }
  try {
    parse_cpu_capability("sse4", "LOOM_CPU_CAPABILITY");
    FAIL() << "sse4 accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("LOOM_CPU_CAPABILITY"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("sse4"), std::string::npos);
  }
}

// Best first, down to the portable path, and never above what the CPU has.
TEST(CpuCapability, RunnablePathsStartAtTheDetectedOneAndEndPortable) {
  const auto runnable = runnable_cpu_capabilities();
  ASSERT_FALSE(runnable.empty());
  EXPECT_EQ(runnable.front(), detected_cpu_capability());
  EXPECT_EQ(runnable.back(), CpuCapability::kDefault);
  EXPECT_EQ(runnable.size(), static_cast<size_t>(detected_cpu_capability()) + 1);
}

// The process's path is the detected one lowered by LOOM_CPU_CAPABILITY (CI runs this suite
// with it set to avx2 and to default).
TEST(CpuCapability, TheEnvironmentLowersButNeverRaisesThePath) {
  const char* forced = std::getenv("LOOM_CPU_CAPABILITY");
  const CpuCapability detected = detected_cpu_capability();
  if (forced == nullptr || *forced == '\0') {
    EXPECT_EQ(cpu_capability(), detected);
  } else {
    const CpuCapability asked = parse_cpu_capability(forced, "LOOM_CPU_CAPABILITY");
    EXPECT_EQ(cpu_capability(), asked < detected ? asked : detected);
  }
  EXPECT_EQ(for_capability(CpuCapability::kAvx2, 1, 2, 3), 2);
  EXPECT_EQ(for_capability(CpuCapability::kDefault, 1, 2, 3), 3);
}

}  // namespace
}  // namespace loom
