// The primitive image operations transform lists are made of, on uint8 HWC tensors with any
// number of channels: torchvision's RandomResizedCrop sampling, bilinear resize (Loom's kernel in
// bilinear_resize.h, on every instruction set), horizontal flip (Gaussian blur is in
// gaussian_blur.h). Randomness comes from the KeyedRng passed in.
#pragma once

#include <ATen/ATen.h>

#include "loom/core/rng.h"
#include "loom/data/image_codec.h"

namespace loom::data {

struct ResizedCropSpec {
  double scale_min = 0.08, scale_max = 1.0;             // of the image area
  double ratio_min = 3.0 / 4.0, ratio_max = 4.0 / 3.0;  // width / height
};

// torchvision's RandomResizedCrop parameters: up to 10 tries of a random area fraction and
// log-uniform aspect ratio, then a centred crop of the nearest allowed aspect ratio.
CropRect sample_resized_crop(int width, int height, const ResizedCropSpec& spec, KeyedRng& rng);

// Bilinear resize (half-pixel centres, no antialiasing) of uint8 [h, w, C] into `out`
// (uint8 [H, W, C], rows contiguous; it may be a window of a larger image).
void resize_into(const at::Tensor& image, at::Tensor out);

void flip_horizontal(at::Tensor image);  // in place

}  // namespace loom::data
