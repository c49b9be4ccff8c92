// Image transforms on uint8 HWC RGB, fused with decoding: the crop is chosen from the header
// alone, then only that window is decoded (DCT-downscaled as far as it stays at least the target
// size) and resized once with OpenCV's SIMD bilinear resize. All randomness comes from the KeyedRng
// passed in, keyed by (seed, epoch, sample index) by the caller, so results never depend on
// which thread ran them.
#pragma once

#include <ATen/ATen.h>

#include "loom/core/rng.h"
#include "loom/data/image_codec.h"

namespace loom::data {

struct ResizedCropSpec {
  int size = 224;                                       // output is size x size
  double scale_min = 0.08, scale_max = 1.0;             // of the image area
  double ratio_min = 3.0 / 4.0, ratio_max = 4.0 / 3.0;  // width / height
};

// torchvision's RandomResizedCrop parameters: up to 10 tries of a random area fraction and
// log-uniform aspect ratio, then a centred crop of the nearest allowed aspect ratio.
CropRect sample_resized_crop(int width, int height, const ResizedCropSpec& spec, KeyedRng& rng);

// The region torchvision's Resize(size * 8 / 7) + CenterCrop(size) keeps, in source pixels.
CropRect center_crop_region(int width, int height, int size);

// Bilinear resize of uint8 HWC (3 channels) into `out` (uint8 [h, w, 3], contiguous).
void resize_into(const at::Tensor& image, at::Tensor out);

void flip_horizontal(at::Tensor image);  // in place, uint8 HWC

struct TransformSpec {
  bool train = true;  // RandomResizedCrop + flip; else the centre crop
  ResizedCropSpec crop;
  bool flip = true;
  int64_t max_pixels = 0;
};

// Decodes `bytes` through the transform into `out` (uint8 [size, size, 3]). Throws SampleError.
void decode_transformed(const std::string& bytes, const std::string& origin,
                        const TransformSpec& spec, KeyedRng& rng, at::Tensor out);

}  // namespace loom::data
