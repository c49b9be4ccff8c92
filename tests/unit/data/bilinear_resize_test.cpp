#include "loom/data/bilinear_resize.h"

#include <gtest/gtest.h>

#include <array>
#include <vector>

#include "loom/data/avx512.h"
#include "loom/data/transforms.h"

namespace loom::data {
namespace {

// Bilinear interpolation in double precision (half-pixel centres, no antialiasing), rounded.
at::Tensor exact_resize(const at::Tensor& hwc, int64_t h, int64_t w) {
  at::Tensor x = hwc.permute({2, 0, 1}).unsqueeze(0).to(at::kDouble);
  at::Tensor y = at::upsample_bilinear2d(x, {h, w}, /*align_corners=*/false);
  return y.squeeze(0).permute({1, 2, 0}).round().clamp(0, 255);
}

struct Shape {
  int64_t h, w, c, out_h, out_w;
};

// Shrinking, enlarging, odd sizes (masked row ends), one and four channels, a one-pixel-wide
// source: every value within a level of the exact result, and almost all on it (~1% off by one
// on the large images, 3% on the smallest; OpenCV's fixed point misses ~13% of them).
TEST(BilinearResize, StaysWithinALevelOfTheExactResult) {
  if (!cpu_has_avx512()) GTEST_SKIP() << "this CPU has no AVX-512 BW/VL";
  for (const Shape& s : std::vector<Shape>{{255, 290, 3, 224, 224},
                                           {120, 150, 3, 224, 224},
                                           {50, 70, 3, 61, 43},
                                           {28, 28, 1, 20, 17},
                                           {33, 41, 4, 24, 30},
                                           {9, 1, 3, 5, 7}}) {
    at::manual_seed(s.h * 1000 + s.w);
    at::Tensor image = at::randint(0, 256, {s.h, s.w, s.c}, at::kByte);
    at::Tensor out = at::empty({s.out_h, s.out_w, s.c}, at::kByte);
    ASSERT_TRUE(resize_bilinear_avx512(image, out)) << s.w << "x" << s.h;
    const at::Tensor diff = (out.to(at::kDouble) - exact_resize(image, s.out_h, s.out_w)).abs();
    EXPECT_LE(diff.max().item<double>(), 1.0) << s.w << "x" << s.h << " -> " << s.out_w;
    EXPECT_LT(diff.gt(0).to(at::kDouble).mean().item<double>(), 0.05) << s.w << "x" << s.h;
  }
}

// From a window of one image into a window of another (strided rows), leaving the rest alone.
TEST(BilinearResize, ReadsAndWritesWindows) {
  if (!cpu_has_avx512()) GTEST_SKIP() << "this CPU has no AVX-512 BW/VL";
  at::manual_seed(5);
  at::Tensor image = at::randint(0, 256, {80, 90, 3}, at::kByte);
  const at::Tensor source = image.slice(0, 10, 70).slice(1, 7, 83);
  at::Tensor canvas = at::zeros({60, 70, 3}, at::kByte);
  at::Tensor target = canvas.slice(0, 4, 54).slice(1, 6, 66);
  ASSERT_TRUE(resize_bilinear_avx512(source, target));
  at::Tensor packed = at::empty({50, 60, 3}, at::kByte);
  ASSERT_TRUE(resize_bilinear_avx512(source.contiguous(), packed));
  EXPECT_TRUE(target.equal(packed));
  EXPECT_EQ(canvas.slice(0, 0, 4).sum().item<int64_t>(), 0);
  EXPECT_EQ(canvas.slice(1, 66, 70).sum().item<int64_t>(), 0);
}

// Beyond a 2x horizontal shrink 32 output values need more than 64 source values: the fast
// path declines without touching the output, and resize_into falls back to OpenCV.
TEST(BilinearResize, DeclinesStrongShrinksAndResizeIntoFallsBack) {
  if (!cpu_has_avx512()) GTEST_SKIP() << "this CPU has no AVX-512 BW/VL";
  at::manual_seed(6);
  at::Tensor image = at::randint(0, 256, {40, 100, 3}, at::kByte);
  at::Tensor out = at::zeros({20, 40, 3}, at::kByte);
  EXPECT_FALSE(resize_bilinear_avx512(image, out));
  EXPECT_EQ(out.sum().item<int64_t>(), 0);
  resize_into(image, out);
  EXPECT_LE((out.to(at::kDouble) - exact_resize(image, 20, 40)).abs().max().item<double>(), 1.0);
}

}  // namespace
}  // namespace loom::data
