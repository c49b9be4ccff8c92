#include "loom/data/transform_pipeline.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "loom/core/error.h"
#include "loom/data/sample_error.h"
#include "loom/data/transform_registry.h"

namespace loom::data {
namespace {

using Kind = TransformStep::Kind;

// The folded geometric steps: the output is `out_width` x `out_height` pixels showing the source
// rectangle (x, y, w, h), which may reach outside the image (zero padding).
struct View {
  double x = 0, y = 0, w = 0, h = 0;
  int out_width = 0, out_height = 0;
};

View whole(int width, int height) { return {0, 0, double(width), double(height), width, height}; }

// Narrows the view to a window of its current output, in output pixels.
void crop_view(View& v, double left, double top, int width, int height) {
  const double sx = v.w / v.out_width, sy = v.h / v.out_height;
  v.x += left * sx;
  v.y += top * sy;
  v.w = width * sx;
  v.h = height * sy;
  v.out_width = width;
  v.out_height = height;
}

// torchvision's centring: round half to even when the window fits, else pad (want - have) / 2
// on the leading side.
double center_offset(int have, int want) {
  return have >= want ? std::nearbyint((have - want) / 2.0) : -double((want - have) / 2);
}

// torchvision's Resize: one number sets the shorter side and truncates the longer one.
std::pair<int, int> resized_size(const TransformStep& s, int height, int width) {
  if (s.width > 0) return {s.height, s.width};
  if (width <= height) return {static_cast<int>(int64_t{s.height} * height / width), s.height};
  return {s.height, static_cast<int>(int64_t{s.height} * width / height)};
}

void apply_geometric(const TransformStep& s, View& v, KeyedRng& rng) {
  switch (s.kind) {
    case Kind::kRandomResizedCrop: {
      const CropRect r = sample_resized_crop(v.out_width, v.out_height, s.crop, rng);
      crop_view(v, r.x, r.y, r.width, r.height);
      v.out_width = s.width;
      v.out_height = s.height;
      break;
    }
    case Kind::kResize: {
      const auto [h, w] = resized_size(s, v.out_height, v.out_width);
      v.out_height = h;
      v.out_width = w;
      break;
    }
    case Kind::kCenterCrop:
      crop_view(v, center_offset(v.out_width, s.width), center_offset(v.out_height, s.height),
                s.width, s.height);
      break;
    case Kind::kRandomCrop: {
      // torchvision draws the row first. A padded image still smaller than the window is
      // centred with zeros around it instead of failing the sample.
      auto offset = [&](int have, int want) {
        const int padded = have + 2 * s.padding;
        const double at = padded >= want
                              ? double(rng.below(static_cast<uint64_t>(padded - want + 1)))
                              : center_offset(padded, want);
        return at - s.padding;
      };
      const double top = offset(v.out_height, s.height);
      const double left = offset(v.out_width, s.width);
      crop_view(v, left, top, s.width, s.height);
      break;
    }
    default:
      break;
  }
}

// Where the view's pixels come from and go to: a whole-pixel source window and the part of the
// output it fills (all of it unless the view reaches outside the image).
struct Placement {
  CropRect source, target;
  bool covers_output = true;
};

Placement place(const View& v, int width, int height) {
  auto axis = [](double start, double length, int size, int out, int& src0, int& src_len, int& dst0,
                 int& dst_len) {
    const double scale = length / out;
    src0 = std::clamp(static_cast<int>(std::lround(start)), 0, size - 1);
    const int src1 = std::clamp(static_cast<int>(std::lround(start + length)), src0 + 1, size);
    src_len = src1 - src0;
    // Edges inside the image map to the output's edges exactly; only padded sides move.
    dst0 = start < 0 ? std::clamp(static_cast<int>(std::lround(-start / scale)), 0, out - 1) : 0;
    const int dst1 =
        start + length > size
            ? std::clamp(static_cast<int>(std::lround((size - start) / scale)), dst0 + 1, out)
            : out;
    dst_len = dst1 - dst0;
  };
  Placement p;
  axis(v.x, v.w, width, v.out_width, p.source.x, p.source.width, p.target.x, p.target.width);
  axis(v.y, v.h, height, v.out_height, p.source.y, p.source.height, p.target.y, p.target.height);
  p.covers_output = p.target.width == v.out_width && p.target.height == v.out_height;
  return p;
}

at::Tensor window(const at::Tensor& image, const CropRect& r) {
  return image.slice(0, r.y, r.y + r.height).slice(1, r.x, r.x + r.width);
}

// Resizes `pixels` into the placement's target window of `out`, zeroing the padding.
void fill(const at::Tensor& pixels, const Placement& p, at::Tensor out) {
  if (!p.covers_output) out.zero_();
  resize_into(pixels, window(out, p.target));
}

}  // namespace

TransformPipeline::TransformPipeline(const std::vector<TransformConfig>& list, int channels,
                                     int input_height, int input_width, const std::string& key)
    : channels_(channels) {
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string where = key + "[" + std::to_string(i) + "]";
    TransformConfig t = list[i];
    complete_transform(t, where);
    if (const auto make = find_transform(t.name)->make) {
      steps_.push_back(make(t));
      continue;
    }
    // normalize, the one entry without a step: the feeder applies it while converting.
    if (i + 1 != list.size()) {
      throw ConfigError::at_key(where, "normalize must be the last transform",
                                {{"problem", "not_last"}, {"value", t.name}});
    }
    ChannelStats stats{t.params.at("mean"), t.params.at("std")};
    if (stats.mean.size() == 1) {
      stats.mean.resize(static_cast<size_t>(channels), stats.mean[0]);
      stats.stddev.resize(static_cast<size_t>(channels), stats.stddev[0]);
    }
    if (stats.mean.size() != static_cast<size_t>(channels)) {
      throw ConfigError::at_key(where,
                                std::to_string(stats.mean.size()) + " means for images with " +
                                    std::to_string(channels) + " channels",
                                {{"problem", "channels"},
                                 {"value", std::to_string(stats.mean.size())},
                                 {"expected", std::to_string(channels)}});
    }
    normalize_ = stats;
  }
  // The output size must not depend on the image: follow it through the steps (0 = varies).
  int h = input_height, w = input_width;
  for (const auto& s : steps_) {
    if (s.kind == Kind::kResize) {
      if (s.width > 0) {
        std::tie(h, w) = std::pair{s.height, s.width};
      } else if (h > 0 && w > 0) {
        std::tie(h, w) = resized_size(s, h, w);
      } else {
        h = w = 0;
      }
    } else if (s.geometric()) {
      std::tie(h, w) = std::pair{s.height, s.width};
    } else if (s.kernel_height > 0 && h > 0 &&
               (s.kernel_height / 2 >= h || s.kernel_width / 2 >= w)) {
      const std::string kernel =
          std::to_string(s.kernel_height) + "x" + std::to_string(s.kernel_width);
      const std::string size = std::to_string(h) + "x" + std::to_string(w);
      throw ConfigError::at_key(
          key, "a " + kernel + " kernel is too large for " + size + " images",
          {{"problem", "kernel_too_large"}, {"value", kernel}, {"image_size", size}});
    }
  }
  if (h <= 0 || w <= 0) {
    throw ConfigError::at_key(key,
                              "the images' size would vary; end the list with a fixed size "
                              "(random_resized_crop, center_crop, random_crop or resize: [h, w])",
                              {{"problem", "size_varies"}});
  }
  height_ = h;
  width_ = w;
}

void TransformPipeline::run_pixels(const at::Tensor& image, KeyedRng& rng, at::Tensor out) const {
  run_from(0, image, /*owned=*/false, rng, out);
}

// One geometric step at a time, each resampling the pixels (torchvision's semantics).
void TransformPipeline::run_from(size_t i, at::Tensor current, bool owned, KeyedRng& rng,
                                 at::Tensor out) const {
  auto geometric_from = [&](size_t from) {
    return std::any_of(steps_.begin() + static_cast<int64_t>(from), steps_.end(),
                       [](const TransformStep& s) { return s.geometric(); });
  };
  while (i < steps_.size()) {
    if (!steps_[i].geometric()) {
      if (!owned) {  // the caller's pixels are read-only: work in `out` when the size is final
        if (geometric_from(i)) {
          current = current.clone();
        } else {
          out.copy_(current);
          current = out;
        }
        owned = true;
      }
      steps_[i].apply(steps_[i], current, rng);
      ++i;
      continue;
    }
    const int width = static_cast<int>(current.size(1)), height = static_cast<int>(current.size(0));
    View view = whole(width, height);
    apply_geometric(steps_[i++], view, rng);
    at::Tensor target = geometric_from(i)
                            ? at::empty({view.out_height, view.out_width, channels_}, at::kByte)
                            : out;
    const Placement p = place(view, width, height);
    fill(window(current, p.source), p, target);
    current = target;
    owned = true;
  }
  if (!current.is_same(out)) out.copy_(current);
}

void TransformPipeline::run_encoded(const std::string& bytes, const std::string& origin,
                                    int64_t max_pixels, KeyedRng& rng, at::Tensor out) const {
  // The geometric head of the list is planned from the header; the rest runs on pixels.
  size_t head = 0;
  while (head < steps_.size() && steps_[head].geometric()) ++head;
  View view;
  Placement placement;
  DecodeOptions options;
  options.max_pixels = max_pixels;
  options.plan_from_header = [&](const ImageHeader& header) {
    view = whole(header.width, header.height);
    for (size_t i = 0; i < head; ++i) apply_geometric(steps_[i], view, rng);
    placement = place(view, header.width, header.height);
    return DecodePlan{placement.source, placement.target.width, placement.target.height};
  };
  const DecodedImage decoded =
      decode_image(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), options, origin);
  if (head == 0) {
    run_pixels(decoded.pixels, rng, out);
    return;
  }
  // The decoder may return a slightly larger window (DCT blocks), scaled by m/8: cut out the
  // planned one.
  const double m = decoded.scale_eighths / 8.0;
  const CropRect& got = decoded.region;
  const CropRect& want = placement.source;
  const int px = static_cast<int>(decoded.pixels.size(1)),
            py = static_cast<int>(decoded.pixels.size(0));
  const int x0 = std::clamp(static_cast<int>(std::lround((want.x - got.x) * m)), 0, px - 1);
  const int y0 = std::clamp(static_cast<int>(std::lround((want.y - got.y) * m)), 0, py - 1);
  const int x1 =
      std::clamp(static_cast<int>(std::lround((want.x + want.width - got.x) * m)), x0 + 1, px);
  const int y1 =
      std::clamp(static_cast<int>(std::lround((want.y + want.height - got.y) * m)), y0 + 1, py);
  const at::Tensor pixels = window(decoded.pixels, {x0, y0, x1 - x0, y1 - y0});

  const bool more_geometric = std::any_of(steps_.begin() + static_cast<int64_t>(head), steps_.end(),
                                          [](auto& s) { return s.geometric(); });
  at::Tensor head_out =
      more_geometric ? at::empty({view.out_height, view.out_width, 3}, at::kByte) : out;
  fill(pixels, placement, head_out);
  run_from(head, head_out, /*owned=*/true, rng, out);
}

std::vector<TransformConfig> default_train_transforms(int size) {
  return {{"random_resized_crop", {{"size", {double(size)}}}}, {"random_horizontal_flip"}};
}

std::vector<TransformConfig> default_eval_transforms(int size) {
  return {{"resize", {{"size", {std::floor(size * 8.0 / 7.0)}}}},
          {"center_crop", {{"size", {double(size)}}}}};
}

}  // namespace loom::data
