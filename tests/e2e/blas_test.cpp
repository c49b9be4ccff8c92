// Which BLAS fp32 matrix products ran on: summary.json records it, and on netlib's reference BLAS
// (what Debian's libblas.so.3 is without OpenBLAS) the advisor names it and the package to
// install. The reference BLAS is simulated by putting its folder first on LD_LIBRARY_PATH, which
// is what the dynamic linker resolves on a machine without OpenBLAS; the machine is not changed.
#include <gtest/gtest.h>

#include <filesystem>

#include "tools/run_compare.h"
#include "tools/test_support.h"

namespace loom::test {
namespace {

constexpr const char* kLib = "/usr/lib/x86_64-linux-gnu";

nlohmann::json finding(const nlohmann::json& summary, const std::string& id) {
  for (const auto& f : summary["findings"]) {
    if (f["id"] == id) return f;
  }
  return nullptr;
}

TEST(Blas, TheReferenceBlasIsRecordedAndAdvisedAgainst) {
  const std::string lib = kLib;
  if (!std::filesystem::exists(lib + "/blas/libblas.so.3")) {
    GTEST_SKIP() << "netlib's reference BLAS (libblas3) is not installed";
  }
  TempDir dir;
  const std::string args = "train " + tiny_synthetic_args() +
                           " --set model=mlp --set runtime.precision=fp32 --set train.max_steps=8"
                           " --set train.eval=false --set checkpoint.enabled=false --out ";
  const auto reference = run_loom(args + (dir / "reference"),
                                  "LD_LIBRARY_PATH=" + lib + "/blas:" + lib + "/lapack");
  ASSERT_EQ(reference.exit_code, 0) << reference.output;
  const auto slow = summary_of(dir / "reference");
  EXPECT_EQ(slow["blas"]["library"], "reference") << slow["blas"];
  EXPECT_NE(slow["blas"]["path"].get<std::string>().find("/blas/libblas.so.3"), std::string::npos);
  EXPECT_GT(slow["blas"]["fp32_matmul_flops_per_second"].get<double>(), 0);
  const auto advice = finding(slow, "reference_blas");
  ASSERT_FALSE(advice.is_null()) << slow["findings"];
  EXPECT_EQ(advice["severity"], "high");
  EXPECT_NE(advice["advice"].get<std::string>().find("libopenblas0-openmp"), std::string::npos);

  // As installed: with OpenBLAS (scripts/install-deps.sh) nothing to advise.
  if (!std::filesystem::exists(lib + "/openblas-openmp/libblas.so.3")) return;
  const auto installed = run_loom(args + (dir / "installed"));
  ASSERT_EQ(installed.exit_code, 0) << installed.output;
  const auto fast = summary_of(dir / "installed");
  EXPECT_EQ(fast["blas"]["library"], "openblas-openmp") << fast["blas"];
  EXPECT_TRUE(finding(fast, "reference_blas").is_null()) << fast["findings"];
}

}  // namespace
}  // namespace loom::test
