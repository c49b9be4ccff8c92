#include "loom/data/transforms.h"

#include <gtest/gtest.h>

#include <cmath>

namespace loom::data {
namespace {

at::Tensor random_image(int64_t h, int64_t w) {
  at::manual_seed(1);
  return at::randint(0, 256, {h, w, 3}, at::kByte);
}

// LibTorch's bilinear interpolation (half-pixel centres, no antialiasing) is the reference;
// OpenCV's fixed-point arithmetic may differ by one level.
at::Tensor reference_resize(const at::Tensor& hwc, int64_t h, int64_t w) {
  at::Tensor x = hwc.permute({2, 0, 1}).unsqueeze(0).to(at::kFloat);
  at::Tensor y = at::upsample_bilinear2d(x, {h, w}, /*align_corners=*/false);
  return y.squeeze(0).permute({1, 2, 0}).round().clamp(0, 255);
}

TEST(Transforms, ResizeMatchesBilinearReference) {
  at::Tensor image = random_image(50, 70);
  for (auto [h, w] :
       std::vector<std::pair<int64_t, int64_t>>{{25, 35}, {100, 140}, {32, 32}, {61, 43}}) {
    at::Tensor out = at::empty({h, w, 3}, at::kByte);
    resize_into(image, out);
    at::Tensor diff = (out.to(at::kFloat) - reference_resize(image, h, w)).abs();
    EXPECT_LE(diff.max().item<float>(), 1.0f) << h << "x" << w;
  }
  at::Tensor same = at::empty({50, 70, 3}, at::kByte);
  resize_into(image, same);
  EXPECT_TRUE(same.equal(image));
  // Into a window of a larger image, leaving the rest alone; one channel works the same.
  at::Tensor canvas = at::zeros({40, 40, 3}, at::kByte);
  resize_into(image, canvas.slice(0, 5, 30).slice(1, 3, 38));
  at::Tensor diff =
      (canvas.slice(0, 5, 30).slice(1, 3, 38).to(at::kFloat) - reference_resize(image, 25, 35))
          .abs();
  EXPECT_LE(diff.max().item<float>(), 1.0f);
  EXPECT_EQ(canvas.slice(0, 0, 5).sum().item<int64_t>(), 0);
  at::Tensor gray = image.slice(2, 0, 1).contiguous(), gray_out = at::empty({25, 35, 1}, at::kByte);
  resize_into(gray, gray_out);
  EXPECT_LE((gray_out.to(at::kFloat) - reference_resize(gray, 25, 35)).abs().max().item<float>(),
            1.0f);
}

TEST(Transforms, FlipReversesColumns) {
  at::Tensor image = random_image(4, 5);
  at::Tensor flipped = image.clone();
  flip_horizontal(flipped);
  EXPECT_TRUE(flipped.equal(image.flip({1})));
}

TEST(Transforms, RandomResizedCropStaysWithinItsScaleAndRatio) {
  ResizedCropSpec spec;
  int fallbacks = 0;
  for (uint64_t key = 0; key < 2000; ++key) {
    KeyedRng rng(key);
    CropRect r = sample_resized_crop(400, 350, spec, rng);
    ASSERT_GE(r.x, 0);
    ASSERT_GE(r.y, 0);
    ASSERT_LE(r.x + r.width, 400);
    ASSERT_LE(r.y + r.height, 350);
    const double area = double(r.width) * r.height / (400.0 * 350.0);
    const double ratio = double(r.width) / r.height;
    if (r.width == 400 && r.height == 350) {
      ++fallbacks;  // the whole image: 400/350 is inside [3/4, 4/3]
      continue;
    }
    // Rounding the sides to whole pixels moves area and ratio slightly.
    EXPECT_GE(area, 0.08 * 0.97);
    EXPECT_LE(area, 1.0);
    EXPECT_GE(ratio, 0.75 * 0.97);
    EXPECT_LE(ratio, 4.0 / 3.0 * 1.03);
  }
  EXPECT_LT(fallbacks, 40);  // ten tries almost always succeed on a near-square image
  KeyedRng a(7), b(7);
  CropRect ra = sample_resized_crop(400, 350, spec, a), rb = sample_resized_crop(400, 350, spec, b);
  EXPECT_EQ(ra.x, rb.x);
  EXPECT_EQ(ra.width, rb.width);
}

TEST(Transforms, FallbackTrimsExtremeAspectRatios) {
  ResizedCropSpec spec;
  spec.scale_min = spec.scale_max = 1.0;  // a full-area crop never fits a 1000x100 image's ratio
  KeyedRng rng(3);
  CropRect r = sample_resized_crop(1000, 100, spec, rng);
  EXPECT_EQ(r.height, 100);
  EXPECT_EQ(r.width, 133);  // round(100 * 4/3), centred
  EXPECT_EQ(r.x, (1000 - 133) / 2);
}

}  // namespace
}  // namespace loom::data
