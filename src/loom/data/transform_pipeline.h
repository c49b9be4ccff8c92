// A list of image transforms (data.transforms) compiled for one data source, and run per sample
// on uint8 HWC pixels.
//
// The geometric steps at the head of the list (random_resized_crop, resize, center_crop,
// random_crop) only move a window and change the output size, so they are folded into one
// "view": a source rectangle and an output size, computed from the image header alone. Only
// that window is decoded (DCT-downscaled while it stays at least the output size) and resized
// once with OpenCV's SIMD bilinear resize. The remaining steps (flip, blur, and any geometric
// step after them) run on the pixels, in place where the size stays. Folding resamples once
// instead of once per step and rounds the window to whole source pixels; that is the one
// difference from torchvision's step-by-step semantics, which run_pixels (used for images held
// in memory, and by tests as the reference) follows exactly.
//
// All randomness comes from the KeyedRng the caller passes, keyed by (seed, epoch, sample
// index), so output never depends on which thread ran it. Thread-safe: const, with per-thread
// scratch buffers only.
#pragma once

#include <ATen/ATen.h>

#include <optional>
#include <string>
#include <vector>

#include "loom/core/rng.h"
#include "loom/core/transform_config.h"
#include "loom/data/image_set.h"
#include "loom/data/transforms.h"

namespace loom::data {

// One step of a list, made by the transform's entry in the registry (transform_registry.h).
struct TransformStep {
  // Geometric steps move the window and set the output size, and the pipeline folds them;
  // pixel steps change the pixels in place through `apply`.
  enum class Kind { kRandomResizedCrop, kResize, kCenterCrop, kRandomCrop, kPixels };
  Kind kind = Kind::kPixels;
  int height = 0, width = 0;  // output size; resize with width 0 sets the shorter side
  ResizedCropSpec crop;       // random_resized_crop: scale and ratio ranges
  int padding = 0;            // random_crop
  double p = 0.5;             // random_horizontal_flip
  // A neighbourhood kernel's size: images must be more than half of it each way.
  int kernel_height = 0, kernel_width = 0;
  double sigma_min = 0, sigma_max = 0;  // gaussian_blur
  // Pixel steps: runs on one uint8 HWC image, in place; randomness only from `rng`.
  void (*apply)(const TransformStep& step, at::Tensor image, KeyedRng& rng) = nullptr;

  bool geometric() const { return kind != Kind::kPixels; }
};

class TransformPipeline {
 public:
  // `input_height/width` are the images' size when it is fixed (in-memory sets), or 0 when each
  // image has its own (encoded files). The entries are completed against the registry here when
  // the caller has not. Throws ConfigError naming `key` when an entry is bad, the list's output
  // size would vary from image to image, or normalize does not match `channels`.
  TransformPipeline(const std::vector<TransformConfig>& list, int channels, int input_height,
                    int input_width, const std::string& key);

  int height() const { return height_; }
  int width() const { return width_; }
  int channels() const { return channels_; }
  const std::vector<TransformStep>& steps() const { return steps_; }
  // The normalize step's statistics, when the list ends with one.
  const std::optional<ChannelStats>& normalize() const { return normalize_; }

  // Decodes an encoded image through the steps into `out` (uint8 [height, width, 3]).
  // Throws SampleError.
  void run_encoded(const std::string& bytes, const std::string& origin, int64_t max_pixels,
                   KeyedRng& rng, at::Tensor out) const;

  // Runs the steps on decoded pixels (uint8 [h, w, channels]) into `out`.
  void run_pixels(const at::Tensor& image, KeyedRng& rng, at::Tensor out) const;

 private:
  // Runs steps_[first...] on `image`, which may be changed in place when `owned`.
  void run_from(size_t first, at::Tensor image, bool owned, KeyedRng& rng, at::Tensor out) const;

  std::vector<TransformStep> steps_;
  std::optional<ChannelStats> normalize_;
  int channels_ = 3;
  int height_ = 0, width_ = 0;
};

// The defaults when a list is empty: random_resized_crop(size) + flip for training encoded
// images; resize(size * 8 / 7) + center_crop(size) for evaluating them.
std::vector<TransformConfig> default_train_transforms(int size);
std::vector<TransformConfig> default_eval_transforms(int size);

}  // namespace loom::data
