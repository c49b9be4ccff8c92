// Gaussian blur of uint8 HWC images with torchvision's kernel (exp(-x^2 / 2 sigma^2) over
// [-k/2, k/2], normalised; reflected borders without repeating the edge), rounded once at the end.
//
// Why not OpenCV's: its uint8 filter (8.8 fixed point, a generic filter engine) took ~0.2 ms per
// 224x224x3 image with an 11x11 kernel here; this one ~0.03 ms with AVX-512. Rows are filtered
// horizontally into a small ring that stays in L1, then summed vertically into the output, two
// rows at a time, in 16-bit fixed point (pixels with 6 fractional bits, Q15 weights), symmetric
// taps paired: 32 values per instruction with AVX-512, 16 with AVX2, 8 on the portable path
// (LOOM_CPU_CAPABILITY; core/cpu_capability.h). A float version of the same loops took ~0.095 ms.
// Every path writes the same bytes, within one level of the exact result; OpenCV's filter
// (gaussian_blur_reference) rounds about a quarter of the pixels the other way and is kept as a
// reference for tests.
//
// Thread-safe: scratch buffers are per thread.
#pragma once

#include <ATen/ATen.h>

#include <vector>

#include "loom/core/cpu_capability.h"

namespace loom::data {

// In place on uint8 [H, W, C] (rows may be strided). Kernel sides are odd and each radius is
// below the image side it runs along.
void gaussian_blur(at::Tensor image, int kernel_height, int kernel_width, double sigma,
                   CpuCapability path = cpu_capability());

// OpenCV's filter, with the same borders: a reference in tests and benchmarks.
void gaussian_blur_reference(at::Tensor image, int kernel_height, int kernel_width, double sigma);

// torchvision's 1-D kernel: `size` weights summing to 1.
std::vector<float> gaussian_kernel(int size, double sigma);

}  // namespace loom::data
