#include "loom/models/row_kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

namespace loom::models::rows {
namespace {

// Multiples of 1/1024 in [-20, 20]: x - 0.5 is then exact in float, so the only error measured
// is the exponential's.
std::vector<float> uniform(std::int64_t n, unsigned seed) {
  std::mt19937 generator(seed);
  std::uniform_int_distribution<int> value(-20 * 1024, 20 * 1024);
  std::vector<float> x(static_cast<std::size_t>(n));
  for (float& v : x) v = static_cast<float>(value(generator)) / 1024.0f;
  return x;
}

// Every path this CPU runs (the AVX2 one is intrinsics, the others compiled from one body)
// against std::exp in double, within a few float ulp, for lengths with and without a tail past
// the 16 lanes.
TEST(RowKernels, ExpIntoMatchesTheExactExponentialOnEveryPath) {
  for (CpuCapability path : runnable_cpu_capabilities()) {
    SCOPED_TRACE(std::string(to_string(path)));
    for (std::int64_t n : {1, 15, 16, 37, 1000}) {
      const std::vector<float> x = uniform(n, static_cast<unsigned>(n));
      const float scale = 1.0f, shift = 0.5f, factor = 0.25f;
      std::vector<float> out(x.size());
      const float total = exp_into(x.data(), out.data(), n, scale, shift, factor, path);
      double exact_total = 0;
      for (std::size_t j = 0; j < x.size(); ++j) {
        const double exact = std::exp(double{scale} * x[j] - shift);
        exact_total += exact;
        EXPECT_NEAR(out[j], exact * factor, exact * factor * 3e-7) << "element " << j;
      }
      EXPECT_NEAR(total, exact_total, exact_total * 1e-5);
    }
  }
}

// Arguments past the float range are clamped, not turned into inf, NaN or a wrapped exponent.
TEST(RowKernels, ExpIntoClampsArgumentsOutsideTheFloatRange) {
  const std::vector<float> x = {-1000.0f, -88.0f, 89.0f, 1000.0f, 0.0f, -1.0f, 1.0f, 2.0f,
                                -1000.0f, -88.0f, 89.0f, 1000.0f, 0.0f, -1.0f, 1.0f, 2.0f};
  for (CpuCapability path : runnable_cpu_capabilities()) {
    SCOPED_TRACE(std::string(to_string(path)));
    std::vector<float> out(x.size());
    exp_into(x.data(), out.data(), static_cast<std::int64_t>(x.size()), 1.0f, 0.0f, 1.0f, path);
    for (std::size_t j = 0; j < x.size(); ++j) {
      EXPECT_TRUE(std::isfinite(out[j])) << "element " << j;
      EXPECT_GT(out[j], 0.0f) << "element " << j;
    }
    const double low = std::exp(double{-87.3f}), high = std::exp(88.0);
    EXPECT_NEAR(out[0], low, low * 1e-6);
    EXPECT_NEAR(out[3], high, high * 1e-6);
  }
}

}  // namespace
}  // namespace loom::models::rows
