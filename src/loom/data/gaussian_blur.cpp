#include "loom/data/gaussian_blur.h"

#include <c10/util/Exception.h>
#include <immintrin.h>

#include <algorithm>
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

// The two passes, 16 floats at a time with the sums in registers. Compiled for AVX-512 only in
// these functions (Loom is built for baseline x86-64) and called after a CPU check.
#define LOOM_AVX512 __attribute__((target("avx512f")))

// Where a pass writes: floats as they are, or uint8 rounded and clamped to [0, 255].
LOOM_AVX512 inline void store16(__m512 sum, float* out) { _mm512_storeu_ps(out, sum); }
LOOM_AVX512 inline void store16(__m512 sum, uint8_t* out) {
  sum = _mm512_min_ps(_mm512_max_ps(sum, _mm512_setzero_ps()), _mm512_set1_ps(255.0f));
  sum = _mm512_add_ps(sum, _mm512_set1_ps(0.5f));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out),
                   _mm512_cvtusepi32_epi8(_mm512_cvttps_epi32(sum)));
}
inline void store1(float sum, float* out) { *out = sum; }
inline void store1(float sum, uint8_t* out) {
  *out = static_cast<uint8_t>(std::fmin(std::fmax(sum, 0.0f), 255.0f) + 0.5f);
}

// out[k] = sum_i w[i] * input(i)[k] for k < n. The vertical pass gives one row per tap
// (offset 0: input(i) = rows[i]); the horizontal pass one padded row, shifted by a pixel per
// tap (offset = channels: input(i) = rows[0] + offset * i). Four independent sums per step:
// one chain of dependent FMAs would wait on each one's latency.
template <typename Out>
LOOM_AVX512 void weighted_sum(const float* const* rows, int offset, const float* w, int taps,
                              Out* out, int n) {
  auto input = [&](int i) { return offset != 0 ? rows[0] + offset * i : rows[i]; };
  // The kernel is symmetric: pair the taps either side of the centre, one FMA per pair.
  const int centre = taps / 2;
  int k = 0;
  for (; k + 64 <= n; k += 64) {
    const __m512 wc = _mm512_set1_ps(w[centre]);
    const float* mid = input(centre) + k;
    __m512 s0 = _mm512_mul_ps(wc, _mm512_loadu_ps(mid));
    __m512 s1 = _mm512_mul_ps(wc, _mm512_loadu_ps(mid + 16));
    __m512 s2 = _mm512_mul_ps(wc, _mm512_loadu_ps(mid + 32));
    __m512 s3 = _mm512_mul_ps(wc, _mm512_loadu_ps(mid + 48));
    for (int i = 0; i < centre; ++i) {
      const __m512 wi = _mm512_set1_ps(w[i]);
      const float* a = input(i) + k;
      const float* b = input(taps - 1 - i) + k;
      s0 = _mm512_fmadd_ps(wi, _mm512_add_ps(_mm512_loadu_ps(a), _mm512_loadu_ps(b)), s0);
      s1 = _mm512_fmadd_ps(wi, _mm512_add_ps(_mm512_loadu_ps(a + 16), _mm512_loadu_ps(b + 16)), s1);
      s2 = _mm512_fmadd_ps(wi, _mm512_add_ps(_mm512_loadu_ps(a + 32), _mm512_loadu_ps(b + 32)), s2);
      s3 = _mm512_fmadd_ps(wi, _mm512_add_ps(_mm512_loadu_ps(a + 48), _mm512_loadu_ps(b + 48)), s3);
    }
    store16(s0, out + k);
    store16(s1, out + k + 16);
    store16(s2, out + k + 32);
    store16(s3, out + k + 48);
  }
  for (; k + 16 <= n; k += 16) {
    __m512 sum = _mm512_mul_ps(_mm512_set1_ps(w[centre]), _mm512_loadu_ps(input(centre) + k));
    for (int i = 0; i < centre; ++i) {
      const __m512 pair =
          _mm512_add_ps(_mm512_loadu_ps(input(i) + k), _mm512_loadu_ps(input(taps - 1 - i) + k));
      sum = _mm512_fmadd_ps(_mm512_set1_ps(w[i]), pair, sum);
    }
    store16(sum, out + k);
  }
  for (; k < n; ++k) {
    float sum = 0;
    for (int i = 0; i < taps; ++i) sum += w[i] * input(i)[k];
    store1(sum, out + k);
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
  uint8_t* base = image.data_ptr<uint8_t>();
  const int64_t stride = image.stride(0);

  // Rows are filtered horizontally into a ring of the last kernel_height rows, all in L1 cache,
  // kernel_height - 1 rows ahead of the output row, which is then summed vertically from the
  // ring and written over its input (already consumed).
  thread_local std::vector<float> ring, padded;
  ring.resize(static_cast<size_t>(kernel_height) * row_values);
  padded.resize(static_cast<size_t>(w + 2 * rx) * c);
  auto filtered = [&](int row) {
    return ring.data() + static_cast<size_t>(row % kernel_height) * row_values;
  };
  auto filter_row = [&](int row) {
    const uint8_t* in = base + row * stride;
    float* middle = padded.data() + rx * c;
    for (int k = 0; k < row_values; ++k) middle[k] = in[k];
    for (int p = 1; p <= rx; ++p) {  // reflected columns either side
      for (int ch = 0; ch < c; ++ch) {
        middle[-p * c + ch] = middle[p * c + ch];
        middle[(w - 1 + p) * c + ch] = middle[(w - 1 - p) * c + ch];
      }
    }
    const float* start = padded.data();
    weighted_sum(&start, c, wx.data(), kernel_width, filtered(row), row_values);
  };
  std::vector<const float*> rows(static_cast<size_t>(kernel_height));
  int done = -1;  // the last row filtered horizontally
  for (int y = 0; y < h; ++y) {
    while (done < std::min(h - 1, y + ry)) filter_row(++done);
    for (int i = 0; i < kernel_height; ++i) {
      rows[static_cast<size_t>(i)] = filtered(reflect(y + i - ry, h));
    }
    weighted_sum(rows.data(), 0, wy.data(), kernel_height, base + y * stride, row_values);
  }
}

}  // namespace loom::data
