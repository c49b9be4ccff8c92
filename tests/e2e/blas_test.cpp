// Which BLAS fp32 matrix products ran on: summary.json records it. (The advisor's finding for
// netlib's reference BLAS, for a LibTorch built against the system's BLAS, is tested on a
// summary in tests/unit/profile.)
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

// torch's wheel carries MKL inside libtorch_cpu.so, which Loom links ahead of every other
// library: even with netlib's reference BLAS first on LD_LIBRARY_PATH (what a machine whose
// libblas.so.3 is the reference resolves, and what OpenCV's libraries bring in), torch's fp32
// products run on MKL, summary.json says so, and there is nothing to advise.
TEST(Blas, TorchsOwnMklServesMatrixProductsWhateverTheSystemsBlas) {
  const std::string lib = kLib;
  std::string environment;
  if (std::filesystem::exists(lib + "/blas/libblas.so.3")) {
    environment = "LD_LIBRARY_PATH=" + lib + "/blas:" + lib + "/lapack";
  }
  TempDir dir;
  const auto run = run_loom("train " + tiny_synthetic_args() +
                                " --set model=mlp --set runtime.precision=fp32"
                                " --set train.max_steps=8 --set train.eval=false"
                                " --set checkpoint.enabled=false --out " + (dir / "run"),
                            environment);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const auto summary = summary_of(dir / "run");
  EXPECT_EQ(summary["blas"]["library"], "mkl") << summary["blas"];
  EXPECT_NE(summary["blas"]["path"].get<std::string>().find("libtorch_cpu.so"), std::string::npos)
      << summary["blas"];
  EXPECT_GT(summary["blas"]["fp32_matmul_flops_per_second"].get<double>(), 0);
  EXPECT_TRUE(finding(summary, "reference_blas").is_null()) << summary["findings"];
}

}  // namespace
}  // namespace loom::test
