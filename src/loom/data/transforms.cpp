#include "loom/data/transforms.h"

#include <algorithm>
#include <cmath>
#include <opencv2/imgproc.hpp>

namespace loom::data {

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

CropRect center_crop_region(int width, int height, int size) {
  // Resize the shorter side to size * 8 / 7 (256 for 224), then take the central size x size.
  const double scale = (size * 8.0 / 7.0) / std::min(width, height);
  const int side = std::min({width, height, static_cast<int>(std::lround(size / scale))});
  return {(width - side) / 2, (height - side) / 2, side, side};
}

void resize_into(const at::Tensor& image, at::Tensor out) {
  at::Tensor src = image.contiguous();
  const cv::Mat from(static_cast<int>(src.size(0)), static_cast<int>(src.size(1)), CV_8UC3,
                     src.data_ptr<uint8_t>());
  cv::Mat to(static_cast<int>(out.size(0)), static_cast<int>(out.size(1)), CV_8UC3,
             out.data_ptr<uint8_t>());
  if (from.rows == to.rows && from.cols == to.cols) {
    from.copyTo(to);
    return;
  }
  cv::resize(from, to, to.size(), 0, 0, cv::INTER_LINEAR);
}

void flip_horizontal(at::Tensor image) {
  cv::Mat m(static_cast<int>(image.size(0)), static_cast<int>(image.size(1)), CV_8UC3,
            image.data_ptr<uint8_t>());
  cv::flip(m, m, 1);
}

void decode_transformed(const std::string& bytes, const std::string& origin,
                        const TransformSpec& spec, KeyedRng& rng, at::Tensor out) {
  DecodeOptions options;
  options.max_pixels = spec.max_pixels;
  options.target_width = options.target_height = spec.crop.size;
  options.crop_from_header = [&](const ImageHeader& header) {
    return spec.train ? sample_resized_crop(header.width, header.height, spec.crop, rng)
                      : center_crop_region(header.width, header.height, spec.crop.size);
  };
  DecodedImage decoded =
      decode_image(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), options, origin);
  resize_into(decoded.pixels, out);
  if (spec.train && spec.flip && rng.below(2) == 1) flip_horizontal(out);
}

}  // namespace loom::data
