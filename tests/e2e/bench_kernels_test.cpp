// `loom bench kernels`: every case is timed on both sides and Loom's kernel computes what torch's
// does (the structured fields; never the timings' ratios).
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "e2e/json_output.h"
#include "tools/test_support.h"

namespace loom::test {
namespace {

TEST(BenchKernels, TimesEveryCaseOnBothSidesAndTheResultsAgree) {
  TempDir dir;
  const auto r = run_loom("bench kernels --quick --threads 2 --json " + (dir / "kernels.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto json = json_file(dir / "kernels.json");
  EXPECT_EQ(json.at("threads"), 2);
  EXPECT_EQ(json.at("images"), 8);  // --quick
  std::set<std::string> names;
  std::map<std::string, int> groups;
  for (const auto& c : json.at("cases")) {
    const std::string name = c.at("name");
    SCOPED_TRACE(name);
    names.insert(name);
    ++groups[c.at("group").get<std::string>()];
    EXPECT_GT(c.at("loom_seconds").get<double>(), 0);
    EXPECT_GT(c.at("torch_seconds").get<double>(), 0);
    EXPECT_EQ(c.at("repeats"), 3);
    EXPECT_GE(c.at("difference").get<double>(), 0);
    if (c.at("tolerance").get<double>() < 0) {
      EXPECT_TRUE(c.contains("note")) << "a case whose agreement is not checked says why";
      continue;
    }
    EXPECT_LE(c.at("difference").get<double>(), c.at("tolerance").get<double>());
    EXPECT_TRUE(c.at("agrees").get<bool>());
  }
  for (const char* expected :
       {"attention fp32 T=256 B=8", "attention fp32 T=1024 B=2", "attention bf16 T=256 B=8",
        "attention bf16 T=1024 B=2", "resize 290x255 -> 224x224", "resize 150x120 -> 224x224",
        "blur 224x224 k=11 sigma=2", "blur 224x224 k=11 sigma=2 separable",
        "normalize to NCHW float", "normalize to NHWC float"}) {
    EXPECT_EQ(names.count(expected), 1u) << expected << " missing from\n" << json.dump(2);
  }
  EXPECT_EQ(groups["adamw"], 1);
  EXPECT_EQ(groups["resize"], 3);  // the antialiased one too
}

}  // namespace
}  // namespace loom::test
