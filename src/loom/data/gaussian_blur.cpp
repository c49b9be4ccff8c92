#include "loom/data/gaussian_blur.h"

#include <c10/util/Exception.h>
#include <immintrin.h>

#include <cmath>
#include <opencv2/imgproc.hpp>
#include <vector>

namespace loom::data {
namespace {

// Reflection without repeating the edge: -1 -> 1, size -> size - 2.
int reflect(int i, int size) {
  if (i < 0) return -i;
  if (i >= size) return 2 * (size - 1) - i;
  return i;
}

// GCC 12 warns inside its own AVX-512 headers (their "undefined" pass-through operands).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// The two passes, 16 floats at a time with the sum in a register. Compiled for AVX-512 only in
// these functions (Loom is built for baseline x86-64) and called after a CPU check.
#define LOOM_AVX512 __attribute__((target("avx512f")))

// acc[k] = sum_i w[i] * rows[i][k], k < n. Four independent sums per step: one chain of
// dependent FMAs would wait on each one's latency.
LOOM_AVX512 void vertical_avx512(const float* const* rows, const float* w, int taps, float* acc,
                                 int n) {
  int k = 0;
  for (; k + 64 <= n; k += 64) {
    __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    for (int i = 0; i < taps; ++i) {
      const __m512 wi = _mm512_set1_ps(w[i]);
      const float* row = rows[i] + k;
      s0 = _mm512_fmadd_ps(wi, _mm512_loadu_ps(row), s0);
      s1 = _mm512_fmadd_ps(wi, _mm512_loadu_ps(row + 16), s1);
      s2 = _mm512_fmadd_ps(wi, _mm512_loadu_ps(row + 32), s2);
      s3 = _mm512_fmadd_ps(wi, _mm512_loadu_ps(row + 48), s3);
    }
    _mm512_storeu_ps(acc + k, s0);
    _mm512_storeu_ps(acc + k + 16, s1);
    _mm512_storeu_ps(acc + k + 32, s2);
    _mm512_storeu_ps(acc + k + 48, s3);
  }
  for (; k + 16 <= n; k += 16) {
    __m512 sum = _mm512_setzero_ps();
    for (int i = 0; i < taps; ++i) {
      sum = _mm512_fmadd_ps(_mm512_set1_ps(w[i]), _mm512_loadu_ps(rows[i] + k), sum);
    }
    _mm512_storeu_ps(acc + k, sum);
  }
  for (; k < n; ++k) {
    float sum = 0;
    for (int i = 0; i < taps; ++i) sum += w[i] * rows[i][k];
    acc[k] = sum;
  }
}

// Rounds 16 sums to uint8 (clamped to [0, 255]) and stores them.
LOOM_AVX512 void store_rounded(__m512 sum, uint8_t* out) {
  sum = _mm512_min_ps(_mm512_max_ps(sum, _mm512_setzero_ps()), _mm512_set1_ps(255.0f));
  sum = _mm512_add_ps(sum, _mm512_set1_ps(0.5f));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out),
                   _mm512_cvtusepi32_epi8(_mm512_cvttps_epi32(sum)));
}

// out[k] = round(sum_j w[j] * padded[k + j * stride]), clamped to [0, 255], k < n.
LOOM_AVX512 void horizontal_avx512(const float* padded, const float* w, int taps, int stride,
                                   uint8_t* out, int n) {
  int k = 0;
  for (; k + 64 <= n; k += 64) {
    __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    for (int j = 0; j < taps; ++j) {
      const __m512 wj = _mm512_set1_ps(w[j]);
      const float* at = padded + k + j * stride;
      s0 = _mm512_fmadd_ps(wj, _mm512_loadu_ps(at), s0);
      s1 = _mm512_fmadd_ps(wj, _mm512_loadu_ps(at + 16), s1);
      s2 = _mm512_fmadd_ps(wj, _mm512_loadu_ps(at + 32), s2);
      s3 = _mm512_fmadd_ps(wj, _mm512_loadu_ps(at + 48), s3);
    }
    store_rounded(s0, out + k);
    store_rounded(s1, out + k + 16);
    store_rounded(s2, out + k + 32);
    store_rounded(s3, out + k + 48);
  }
  for (; k + 16 <= n; k += 16) {
    __m512 sum = _mm512_setzero_ps();
    for (int j = 0; j < taps; ++j) {
      sum = _mm512_fmadd_ps(_mm512_set1_ps(w[j]), _mm512_loadu_ps(padded + k + j * stride), sum);
    }
    store_rounded(sum, out + k);
  }
  for (; k < n; ++k) {
    float sum = 0;
    for (int j = 0; j < taps; ++j) sum += w[j] * padded[k + j * stride];
    out[k] = static_cast<uint8_t>(std::fmin(std::fmax(sum, 0.0f), 255.0f) + 0.5f);
  }
}

#pragma GCC diagnostic pop

bool have_avx512() {
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") != 0;
  }();
  return yes;
}

}  // namespace

std::vector<float> gaussian_kernel(int size, double sigma) {
  std::vector<float> w(static_cast<size_t>(size));
  const double half = (size - 1) / 2.0;
  double sum = 0;
  for (int i = 0; i < size; ++i) {
    const double x = (-half + i) / sigma;
    w[static_cast<size_t>(i)] = static_cast<float>(std::exp(-0.5 * x * x));
    sum += w[static_cast<size_t>(i)];
  }
  for (auto& v : w) v = static_cast<float>(v / sum);
  return w;
}

void gaussian_blur_reference(at::Tensor image, int kernel_height, int kernel_width, double sigma) {
  const int channels = static_cast<int>(image.size(2));
  cv::Mat m(static_cast<int>(image.size(0)), static_cast<int>(image.size(1)), CV_8UC(channels),
            image.data_ptr<uint8_t>(), static_cast<size_t>(image.stride(0)));
  thread_local cv::Mat scratch;  // the filter reads rows it would already have overwritten
  cv::GaussianBlur(m, scratch, cv::Size(kernel_width, kernel_height), sigma, sigma,
                   cv::BORDER_REFLECT_101);
  scratch.copyTo(m);
}

void gaussian_blur(at::Tensor image, int kernel_height, int kernel_width, double sigma) {
  const int h = static_cast<int>(image.size(0)), w = static_cast<int>(image.size(1));
  const int c = static_cast<int>(image.size(2));
  const int ry = kernel_height / 2, rx = kernel_width / 2;
  TORCH_CHECK(ry < h && rx < w, "gaussian_blur: a ", kernel_height, "x", kernel_width,
              " kernel needs an image larger than its radius, got ", h, "x", w);
  TORCH_CHECK(image.stride(2) == 1 && image.stride(1) == c, "gaussian_blur: rows must be packed");
  if (!have_avx512()) {
    gaussian_blur_reference(image, kernel_height, kernel_width, sigma);
    return;
  }
  const std::vector<float> wy = gaussian_kernel(kernel_height, sigma);
  const std::vector<float> wx = gaussian_kernel(kernel_width, sigma);
  const int row_values = w * c;

  // The whole image in float first, so the output can overwrite it row by row; one padded row.
  thread_local std::vector<float> source, padded;
  source.resize(static_cast<size_t>(h) * row_values);
  padded.resize(static_cast<size_t>(w + 2 * rx) * c);
  uint8_t* base = image.data_ptr<uint8_t>();
  const int64_t stride = image.stride(0);
  for (int y = 0; y < h; ++y) {
    const uint8_t* in = base + y * stride;
    float* out = source.data() + static_cast<size_t>(y) * row_values;
    for (int k = 0; k < row_values; ++k) out[k] = in[k];
  }
  std::vector<const float*> rows(static_cast<size_t>(kernel_height));
  float* middle = padded.data() + rx * c;
  for (int y = 0; y < h; ++y) {
    for (int i = 0; i < kernel_height; ++i) {
      rows[static_cast<size_t>(i)] =
          source.data() + static_cast<size_t>(reflect(y + i - ry, h)) * row_values;
    }
    vertical_avx512(rows.data(), wy.data(), kernel_height, middle, row_values);
    for (int p = 1; p <= rx; ++p) {  // reflected columns either side
      for (int ch = 0; ch < c; ++ch) {
        middle[-p * c + ch] = middle[p * c + ch];
        middle[(w - 1 + p) * c + ch] = middle[(w - 1 - p) * c + ch];
      }
    }
    horizontal_avx512(padded.data(), wx.data(), kernel_width, c, base + y * stride, row_values);
  }
}

}  // namespace loom::data
