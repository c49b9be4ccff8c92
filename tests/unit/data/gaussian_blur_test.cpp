#include "loom/data/gaussian_blur.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace loom::data {
namespace {

// Every path this CPU can run (AVX-512, AVX2, portable), named for messages.
std::vector<CpuCapability> paths() { return runnable_cpu_capabilities(); }
std::string name(CpuCapability path) { return std::string(to_string(path)); }

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

struct Case {
  int64_t h, w, c;
  int kh, kw;
  double sigma;
};

// Odd sizes (vector tails of every width, an odd last row after the rows filtered in pairs),
// 1, 3 and 4 channels, square and oblong kernels, the largest kernel filtered two rows at a time
// (15) and ones filtered a row at a time (17, 25).
const std::vector<Case> kCases = {{37, 53, 3, 11, 11, 2.0}, {20, 31, 1, 5, 9, 0.8},
                                  {64, 64, 3, 3, 3, 0.3},   {13, 17, 3, 25, 7, 5.0},
                                  {41, 45, 3, 15, 13, 3.0}, {30, 40, 3, 17, 5, 3.0},
                                  {29, 19, 4, 7, 11, 1.5}};

// Every path within a level of the exact result and almost always on it (fixed point rounds
// once, at the end), on every case above.
TEST(GaussianBlur, EveryPathIsWithinALevelOfTheExactResult) {
  for (CpuCapability path : paths()) {
    for (const Case& k : kCases) {
      at::manual_seed(k.h * 100 + k.w);
      at::Tensor image = at::randint(0, 256, {k.h, k.w, k.c}, at::kByte);
      at::Tensor fast = image.clone();
      gaussian_blur(fast, k.kh, k.kw, k.sigma, path);
      const at::Tensor diff = (fast.to(at::kDouble) - exact_blur(image, k.kh, k.kw, k.sigma)).abs();
      const std::string where = name(path) + ": " + std::to_string(k.h) + "x" +
                                std::to_string(k.w) + "x" + std::to_string(k.c) + " kernel " +
                                std::to_string(k.kh) + "x" + std::to_string(k.kw);
      EXPECT_LE(diff.max().item<double>(), 1.0) << where;
      EXPECT_LT(diff.gt(0).to(at::kDouble).mean().item<double>(), 0.02) << where;
    }
  }
}

// The paths do the same fixed-point arithmetic in the same order: the same bytes, every case.
TEST(GaussianBlur, EveryPathWritesTheSameBytes) {
  for (const Case& k : kCases) {
    at::manual_seed(k.h);
    const at::Tensor image = at::randint(0, 256, {k.h, k.w, k.c}, at::kByte);
    at::Tensor portable = image.clone();
    gaussian_blur(portable, k.kh, k.kw, k.sigma, CpuCapability::kDefault);
    EXPECT_FALSE(portable.equal(image));
    for (CpuCapability path : paths()) {
      at::Tensor out = image.clone();
      gaussian_blur(out, k.kh, k.kw, k.sigma, path);
      EXPECT_TRUE(out.equal(portable)) << name(path) << " kernel " << k.kh << "x" << k.kw;
    }
  }
}

// A window of a larger image (strided rows) gives the same pixels and leaves the rest alone.
TEST(GaussianBlur, BlursAWindowInPlace) {
  for (CpuCapability path : paths()) {
    at::manual_seed(3);
    const at::Tensor image = at::randint(0, 256, {61, 75, 3}, at::kByte);
    at::Tensor packed = image.clone();
    gaussian_blur(packed, 11, 9, 2.0, path);
    at::Tensor canvas = at::zeros({65, 80, 3}, at::kByte);
    at::Tensor window = canvas.slice(0, 2, 63).slice(1, 3, 78);
    window.copy_(image);
    gaussian_blur(window, 11, 9, 2.0, path);
    EXPECT_TRUE(window.equal(packed)) << name(path);
    EXPECT_EQ(canvas.slice(1, 0, 3).sum().item<int64_t>(), 0) << name(path);
    EXPECT_EQ(canvas.slice(0, 63, 65).sum().item<int64_t>(), 0) << name(path);
  }
}

// OpenCV's filter, the reference benchmarks compare against, agrees within a level (it rounds
// in 8.8 fixed point, so about a quarter of its pixels are a level off the exact result).
TEST(GaussianBlur, OpenCvAgreesWithinOneLevel) {
  for (const Case& k : kCases) {
    at::manual_seed(k.h);
    at::Tensor image = at::randint(0, 256, {k.h, k.w, k.c}, at::kByte);
    at::Tensor fast = image.clone(), reference = image.clone();
    gaussian_blur(fast, k.kh, k.kw, k.sigma);
    gaussian_blur_reference(reference, k.kh, k.kw, k.sigma);
    EXPECT_LE((fast.to(at::kFloat) - reference.to(at::kFloat)).abs().max().item<float>(), 1.0f)
        << k.h << "x" << k.w << "x" << k.c << " kernel " << k.kh << "x" << k.kw;
  }
}

TEST(GaussianBlur, KernelIsTorchvisionsNormalisedGaussian) {
  const std::vector<float> w = gaussian_kernel(11, 2.0);
  float sum = 0;
  for (float v : w) sum += v;
  EXPECT_NEAR(sum, 1.0f, 1e-6);
  EXPECT_FLOAT_EQ(w.front(), w.back());
  EXPECT_GT(w[5], w[4]);
}

}  // namespace
}  // namespace loom::data
