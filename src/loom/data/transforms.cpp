#include "loom/data/transforms.h"

#include <algorithm>
#include <cmath>
#include <opencv2/core/utility.hpp>
#include <opencv2/imgproc.hpp>

#include "loom/data/bilinear_resize.h"

namespace loom::data {
namespace {

// Loom parallelises over samples on its loader threads; OpenCV's own thread pool (TBB in
// Debian's build) would only add scheduling and spinning on the same cores. Measured: about a
// fifth of a blur-heavy pipeline's time went to it.
void serial_opencv() {
  static const bool once = [] {
    cv::setNumThreads(1);
    return true;
  }();
  (void)once;
}

// A view of a uint8 [h, w, C] tensor whose rows may be strided (a window of a larger image).
cv::Mat as_mat(const at::Tensor& image) {
  serial_opencv();
  const int channels = static_cast<int>(image.size(2));
  TORCH_CHECK(image.stride(2) == 1 && image.stride(1) == channels, "image rows must be packed");
  return cv::Mat(static_cast<int>(image.size(0)), static_cast<int>(image.size(1)), CV_8UC(channels),
                 image.data_ptr<uint8_t>(), static_cast<size_t>(image.stride(0)));
}

}  // namespace

CropRect sample_resized_crop(int width, int height, const ResizedCropSpec& s, KeyedRng& rng) {
  const double area = double(width) * height;
  const double log_min = std::log(s.ratio_min), log_max = std::log(s.ratio_max);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target = area * (s.scale_min + (s.scale_max - s.scale_min) * rng.uniform());
    const double aspect = std::exp(log_min + (log_max - log_min) * rng.uniform());
    const int w = static_cast<int>(std::lround(std::sqrt(target * aspect)));
    const int h = static_cast<int>(std::lround(std::sqrt(target / aspect)));
    if (w > 0 && h > 0 && w <= width && h <= height) {
      const int y = static_cast<int>(rng.below(static_cast<uint64_t>(height - h + 1)));
      const int x = static_cast<int>(rng.below(static_cast<uint64_t>(width - w + 1)));
      return {x, y, w, h};
    }
  }
  // Fallback: the whole image, trimmed to the nearest allowed aspect ratio.
  const double ratio = double(width) / height;
  int w = width, h = height;
  if (ratio < s.ratio_min) {
    h = static_cast<int>(std::lround(w / s.ratio_min));
  } else if (ratio > s.ratio_max) {
    w = static_cast<int>(std::lround(h * s.ratio_max));
  }
  return {(width - w) / 2, (height - h) / 2, w, h};
}

void resize_into(const at::Tensor& image, at::Tensor out) {
  const at::Tensor src = image.stride(1) == image.size(2) ? image : image.contiguous();
  const cv::Mat from = as_mat(src);
  cv::Mat to = as_mat(out);
  if (from.rows == to.rows && from.cols == to.cols) {
    from.copyTo(to);
  } else {
    resize_bilinear(src, out);
  }
}

void flip_horizontal(at::Tensor image) {
  cv::Mat m = as_mat(image);
  cv::flip(m, m, 1);
}

}  // namespace loom::data
