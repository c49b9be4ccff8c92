// Bilinear resize of uint8 HWC images in 16-bit fixed point with AVX-512: half-pixel centres,
// edges clamped, no antialiasing (the arithmetic of OpenCV's INTER_LINEAR and of LibTorch's
// upsample_bilinear2d with align_corners=false), within one level of the exact result.
//
// Why: OpenCV's uint8 INTER_LINEAR took ~78 us to bring a ~290x255x3 crop to 224x224x3 here, a
// sixth of the whole decode + crop + flip pipeline; this one takes ~27 us, and rounds ~1% of
// values differently from the exact result where OpenCV rounds ~13%. Each output row is
// first blended from its two source rows over the whole source width (contiguous, 32 values
// per instruction), then every block of 32 output values picks its two neighbours out of 64
// consecutive blended values with one permute each and blends them.
//
// Thread-safe: scratch buffers are per thread.
#pragma once

#include <ATen/ATen.h>

namespace loom::data {

// Resizes uint8 [h, w, C] into `out` (uint8 [H, W, C]; both may be windows of larger images,
// rows packed) and returns true; returns false and leaves `out` alone where it cannot: a CPU
// without AVX-512 BW, or a horizontal shrink so strong (beyond ~1.9x for 3 channels) that 32
// output values need more than 64 source values. The caller then uses OpenCV.
bool resize_bilinear_avx512(const at::Tensor& image, at::Tensor out);

}  // namespace loom::data
