#include "loom/profile/flops.h"

#include <gtest/gtest.h>

namespace loom::profile {
namespace {

TEST(Flops, CountsLinearLayersFromTheirShapes) {
  const at::Tensor x = at::randn({8, 100}), w1 = at::randn({50, 100}), b1 = at::randn({50});
  const at::Tensor w2 = at::randn({10, 50});
  FlopCounter counter;
  at::Tensor h = at::linear(x, w1, b1);  // addmm: 2 * 8 * 100 * 50
  at::Tensor y = at::matmul(h, w2.t());  // mm: 2 * 8 * 50 * 10
  EXPECT_DOUBLE_EQ(counter.flops(), 2.0 * 8 * 100 * 50 + 2.0 * 8 * 50 * 10);
}

TEST(Flops, CountsConvolutionsWithStridePaddingAndGroups) {
  const at::Tensor x = at::randn({2, 4, 16, 16});
  FlopCounter counter;
  at::conv2d(x, at::randn({6, 4, 3, 3}), {}, at::IntArrayRef{1}, at::IntArrayRef{1});
  // 2 x 6 x 16 x 16 outputs, each a 4 * 3 * 3 dot product.
  EXPECT_DOUBLE_EQ(counter.flops(), 2.0 * (2 * 6 * 16 * 16) * (4 * 3 * 3));
  FlopCounter strided;
  at::conv2d(x, at::randn({8, 2, 3, 3}), {}, /*stride=*/at::IntArrayRef{2},
             /*padding=*/at::IntArrayRef{0}, /*dilation=*/at::IntArrayRef{1}, /*groups=*/2);
  // (16 - 3) / 2 + 1 = 7 per side; each output sees Cin / groups = 2 channels.
  EXPECT_DOUBLE_EQ(strided.flops(), 2.0 * (2 * 8 * 7 * 7) * (2 * 3 * 3));
}

TEST(Flops, BatchedProductsAndNothingAfterTheCounterEnds) {
  double inside = 0;
  {
    FlopCounter counter;
    at::bmm(at::randn({3, 4, 5}), at::randn({3, 5, 6}));
    inside = counter.flops();
  }
  EXPECT_DOUBLE_EQ(inside, 2.0 * 3 * 4 * 5 * 6);
  FlopCounter fresh;
  EXPECT_EQ(fresh.flops(), 0.0);
  EXPECT_GT(measure_peak_flops(at::kFloat, 0.02), 1e8);  // any CPU does 0.1 GFLOP/s
}

}  // namespace
}  // namespace loom::profile
