#include "loom/data/transforms.h"

#include <gtest/gtest.h>

#include <cmath>

#include "loom/data/gaussian_blur.h"

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

// The vectorised blur against OpenCV's filter on odd sizes (vector tails, an odd last row after
// the rows filtered in pairs), 1 and 3 channels, square and oblong kernels, the largest kernel
// filtered two rows at a time (15) and ones filtered a row at a time (17, 25). (torchvision is
// the reference in transform_pipeline_test.)
TEST(Transforms, GaussianBlurMatchesOpenCvWithinOneLevel) {
  struct Case {
    int64_t h, w, c;
    int kh, kw;
    double sigma;
  };
  for (const Case& k : std::vector<Case>{{37, 53, 3, 11, 11, 2.0},
                                         {20, 31, 1, 5, 9, 0.8},
                                         {64, 64, 3, 3, 3, 0.3},
                                         {13, 17, 3, 25, 7, 5.0},
                                         {41, 45, 3, 15, 13, 3.0},
                                         {30, 40, 3, 17, 5, 3.0}}) {
    at::manual_seed(k.h);
    at::Tensor image = at::randint(0, 256, {k.h, k.w, k.c}, at::kByte);
    at::Tensor fast = image.clone(), reference = image.clone();
    gaussian_blur(fast, k.kh, k.kw, k.sigma);
    gaussian_blur_reference(reference, k.kh, k.kw, k.sigma);
    EXPECT_LE((fast.to(at::kFloat) - reference.to(at::kFloat)).abs().max().item<float>(), 1.0f)
        << k.h << "x" << k.w << "x" << k.c << " kernel " << k.kh << "x" << k.kw;
    EXPECT_FALSE(fast.equal(image));
  }
  const std::vector<float> w = gaussian_kernel(11, 2.0);
  float sum = 0;
  for (float v : w) sum += v;
  EXPECT_NEAR(sum, 1.0f, 1e-6);
  EXPECT_FLOAT_EQ(w.front(), w.back());
  EXPECT_GT(w[5], w[4]);
}

// The exact blur in double precision (torchvision's kernel, reflected borders), rounded once.
at::Tensor exact_blur(const at::Tensor& image, int kh, int kw, double sigma) {
  at::Tensor x = image.to(at::kDouble).permute({2, 0, 1}).unsqueeze(0);  // 1 C H W
  const int64_t c = x.size(1);
  auto kernel = [](int k, double s) {
    const auto w = gaussian_kernel(k, s);
    return at::tensor(std::vector<double>(w.begin(), w.end()), at::kDouble);
  };
  x = at::reflection_pad2d(x, {kw / 2, kw / 2, kh / 2, kh / 2});
  x = at::conv2d(x, kernel(kw, sigma).view({1, 1, 1, kw}).repeat({c, 1, 1, 1}), at::Tensor(),
                 at::IntArrayRef{1}, at::IntArrayRef{0}, at::IntArrayRef{1}, c);
  x = at::conv2d(x, kernel(kh, sigma).view({1, 1, kh, 1}).repeat({c, 1, 1, 1}), at::Tensor(),
                 at::IntArrayRef{1}, at::IntArrayRef{0}, at::IntArrayRef{1}, c);
  return x.squeeze(0).permute({1, 2, 0}).round().clamp(0, 255);
}

// Fixed point stays within a level of the exact result, and almost always on it.
TEST(Transforms, GaussianBlurIsWithinALevelOfTheExactResult) {
  for (double sigma : {0.5, 2.0, 4.0}) {
    at::manual_seed(3);
    at::Tensor image = at::randint(0, 256, {61, 75, 3}, at::kByte);
    at::Tensor fast = image.clone();
    gaussian_blur(fast, 11, 9, sigma);
    const at::Tensor diff = (fast.to(at::kDouble) - exact_blur(image, 11, 9, sigma)).abs();
    // A window of a larger image (strided rows) gives the same pixels and leaves the rest.
    at::Tensor canvas = at::zeros({65, 80, 3}, at::kByte);
    at::Tensor window = canvas.slice(0, 2, 63).slice(1, 3, 78);
    window.copy_(image);
    gaussian_blur(window, 11, 9, sigma);
    EXPECT_TRUE(window.equal(fast)) << "sigma " << sigma;
    EXPECT_EQ(canvas.slice(1, 0, 3).sum().item<int64_t>(), 0);
    EXPECT_LE(diff.max().item<double>(), 1.0) << "sigma " << sigma;
    EXPECT_LT(diff.gt(0).to(at::kDouble).mean().item<double>(), 0.02) << "sigma " << sigma;
  }
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
