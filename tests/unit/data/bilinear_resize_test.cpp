#include "loom/data/bilinear_resize.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

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
  std::string name() const {
    return std::to_string(w) + "x" + std::to_string(h) + "x" + std::to_string(c) + " -> " +
           std::to_string(out_w) + "x" + std::to_string(out_h);
  }
};

// Shrinking, enlarging, odd sizes (partial vectors at row ends), 1 to 5 channels, a
// one-pixel-wide source, and shrinks too strong for the vector paths' windows (2.5x, 4x: one
// value at a time on every path).
const std::vector<Shape> kShapes = {
    {255, 290, 3, 224, 224}, {120, 150, 3, 224, 224}, {50, 70, 3, 61, 43}, {28, 28, 1, 20, 17},
    {33, 41, 4, 24, 30},     {9, 1, 3, 5, 7},         {21, 37, 2, 30, 19}, {17, 23, 5, 11, 29},
    {40, 100, 3, 20, 40},    {64, 250, 1, 15, 60}};

std::string name(CpuCapability path) { return std::string(to_string(path)); }

// Every value within a level of the exact result, and almost all on it (~1% off by one on the
// large images, a few % on the smallest; OpenCV's fixed point misses ~13% of them).
TEST(BilinearResize, EveryPathStaysWithinALevelOfTheExactResult) {
  for (CpuCapability path : runnable_cpu_capabilities()) {
    for (const Shape& s : kShapes) {
      at::manual_seed(s.h * 1000 + s.w);
      at::Tensor image = at::randint(0, 256, {s.h, s.w, s.c}, at::kByte);
      at::Tensor out = at::empty({s.out_h, s.out_w, s.c}, at::kByte);
      resize_bilinear(image, out, path);
      const at::Tensor diff = (out.to(at::kDouble) - exact_resize(image, s.out_h, s.out_w)).abs();
      EXPECT_LE(diff.max().item<double>(), 1.0) << name(path) << " " << s.name();
      EXPECT_LT(diff.gt(0).to(at::kDouble).mean().item<double>(), 0.06)
          << name(path) << " " << s.name();
    }
  }
}

// The paths do the same fixed-point arithmetic: the same bytes as the portable path.
TEST(BilinearResize, EveryPathWritesTheSameBytes) {
  for (const Shape& s : kShapes) {
    at::manual_seed(s.w);
    const at::Tensor image = at::randint(0, 256, {s.h, s.w, s.c}, at::kByte);
    at::Tensor portable = at::empty({s.out_h, s.out_w, s.c}, at::kByte);
    resize_bilinear(image, portable, CpuCapability::kDefault);
    for (CpuCapability path : runnable_cpu_capabilities()) {
      at::Tensor out = at::empty({s.out_h, s.out_w, s.c}, at::kByte);
      resize_bilinear(image, out, path);
      EXPECT_TRUE(out.equal(portable)) << name(path) << " " << s.name();
    }
  }
}

// From a window of one image into a window of another (strided rows), leaving the rest alone.
TEST(BilinearResize, ReadsAndWritesWindows) {
  for (CpuCapability path : runnable_cpu_capabilities()) {
    at::manual_seed(5);
    at::Tensor image = at::randint(0, 256, {80, 90, 3}, at::kByte);
    const at::Tensor source = image.slice(0, 10, 70).slice(1, 7, 83);
    at::Tensor canvas = at::zeros({60, 70, 3}, at::kByte);
    at::Tensor target = canvas.slice(0, 4, 54).slice(1, 6, 66);
    resize_bilinear(source, target, path);
    at::Tensor packed = at::empty({50, 60, 3}, at::kByte);
    resize_bilinear(source.contiguous(), packed, path);
    EXPECT_TRUE(target.equal(packed)) << name(path);
    EXPECT_EQ(canvas.slice(0, 0, 4).sum().item<int64_t>(), 0) << name(path);
    EXPECT_EQ(canvas.slice(1, 66, 70).sum().item<int64_t>(), 0) << name(path);
    EXPECT_EQ(canvas.slice(0, 54, 60).sum().item<int64_t>(), 0) << name(path);
  }
}

// resize_into, what RandomResizedCrop calls, takes the process's path and copies equal sizes.
TEST(BilinearResize, ResizeIntoUsesTheKernelAndCopiesEqualSizes) {
  at::manual_seed(6);
  at::Tensor image = at::randint(0, 256, {40, 100, 3}, at::kByte);
  at::Tensor out = at::zeros({20, 40, 3}, at::kByte), expected = at::empty({20, 40, 3}, at::kByte);
  resize_into(image, out);
  resize_bilinear(image, expected, CpuCapability::kDefault);
  EXPECT_TRUE(out.equal(expected));
  at::Tensor same = at::empty({40, 100, 3}, at::kByte);
  resize_into(image, same);
  EXPECT_TRUE(same.equal(image));
}

}  // namespace
}  // namespace loom::data
