// Bilinear resize of uint8 HWC images in 16-bit fixed point: half-pixel centres, edges clamped,
// no antialiasing (the arithmetic of OpenCV's INTER_LINEAR and of LibTorch's upsample_bilinear2d
// with align_corners=false), within one level of the exact result.
//
// Why: OpenCV's uint8 INTER_LINEAR took ~78 us to bring a ~290x255x3 crop to 224x224x3 here, a
// sixth of the whole decode + crop + flip pipeline; this one takes ~27 us with AVX-512, and
// rounds ~1% of values differently from the exact result where OpenCV rounds ~13%. Each output
// row is first blended from its two source rows over the whole source width (contiguous, a
// vector of values per instruction), then each output value is blended from its two neighbours
// in that row:
//   - AVX-512: every block of 32 output values picks its neighbours out of 64 consecutive
//     blended values with one two-register permute each;
//   - AVX2: the blended row is rewritten as pairs (value, same channel of the next pixel), and
//     every block of 8 output values picks its pairs out of 24 consecutive ones with three
//     permutes and blends them with one multiply-add;
//   - portable, and where a shrink is too strong for those windows (beyond ~1.9x for 3
//     channels with AVX-512, ~2.3x with AVX2): one value at a time.
// Every path does the same fixed-point arithmetic and writes the same bytes.
//
// Thread-safe: scratch buffers are per thread.
#pragma once

#include <ATen/ATen.h>

#include "loom/core/cpu_capability.h"

namespace loom::data {

// Resizes uint8 [h, w, C] into `out` (uint8 [H, W, C]; both may be windows of larger images,
// rows packed). `path` chooses the instruction set (tests run every one).
void resize_bilinear(const at::Tensor& image, at::Tensor out,
                     CpuCapability path = cpu_capability());

}  // namespace loom::data
