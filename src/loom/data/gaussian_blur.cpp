#include "loom/data/gaussian_blur.h"

#include <c10/util/Exception.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <opencv2/imgproc.hpp>
#include <vector>

#include "loom/data/avx512.h"

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

// The two passes, 32 values at a time with the sums in registers (LOOM_AVX512: avx512.h).

// Fixed point, twice as many values per instruction as float: pixels carry 6 fractional bits in
// int16 (at most 255 x 64 = 16320, so the pair of symmetric taps still fits), weights are Q15,
// and _mm512_mulhrs_epi16 multiplies and rounds back to 6 fractional bits. Each product is off by
// at most half of 1/64 level, so both passes together stay within a tenth of a level of the
// float result before the final rounding.
constexpr int kFractionBits = 6;

int16_t mulhrs(int32_t a, int32_t b) { return static_cast<int16_t>((a * b + 0x4000) >> 15); }

// Where a pass writes: the fixed-point values as they are, or uint8 rounded.
LOOM_AVX512 inline void store32(__m512i sum, int16_t* out) { _mm512_storeu_si512(out, sum); }
LOOM_AVX512 inline void store32(__m512i sum, uint8_t* out) {
  const __m512i half = _mm512_set1_epi16(1 << (kFractionBits - 1));
  const __m512i rounded = _mm512_srai_epi16(_mm512_add_epi16(sum, half), kFractionBits);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm512_cvtusepi16_epi8(rounded));
}
inline void store1(int32_t sum, int16_t* out) { *out = static_cast<int16_t>(sum); }
inline void store1(int32_t sum, uint8_t* out) {
  *out =
      static_cast<uint8_t>(std::clamp((sum + (1 << (kFractionBits - 1))) >> kFractionBits, 0, 255));
}
// What a pass reads, in fixed point: ring values as they are, image bytes shifted.
inline int32_t fixed_point(int16_t v) { return v; }
inline int32_t fixed_point(uint8_t v) { return v << kFractionBits; }

LOOM_AVX512 inline __m512i load32(const int16_t* p) { return _mm512_loadu_si512(p); }
// 32 uint8 values in fixed point.
LOOM_AVX512 inline __m512i load32(const uint8_t* p) {
  const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_slli_epi16(_mm512_cvtepu8_epi16(bytes), kFractionBits);
}
// w * (a + b), rounded to the pixels' fixed point.
LOOM_AVX512 inline __m512i pair_product(__m512i w, const int16_t* a, const int16_t* b) {
  return _mm512_mulhrs_epi16(w, _mm512_add_epi16(load32(a), load32(b)));
}
LOOM_AVX512 inline __m512i pair_product(__m512i w, const uint8_t* a, const uint8_t* b) {
  const __m512i sum = _mm512_add_epi16(
      _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a))),
      _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b))));
  return _mm512_mulhrs_epi16(w, _mm512_slli_epi16(sum, kFractionBits));  // <= 510 x 64 fits
}

// out[k] = sum_i w[i] * input(i)[k] for k < n. The vertical pass gives one ring row per tap
// (offset 0: input(i) = rows[i]); the horizontal pass one padded uint8 row, shifted by a pixel
// per tap (offset = channels: input(i) = rows[0] + offset * i). It reads bytes, not the
// widened row: the same values in half the loads, and loads were what the pass waited on
// (36 -> 33 us per blur). The kernel is symmetric: the taps either side of the centre are added
// first, one multiply per pair. Four independent sums per step keep the multiplier busy.
template <typename In, typename Out>
LOOM_AVX512 void weighted_sum(const In* const* rows, int offset, const int16_t* w, int taps,
                              Out* out, int n) {
  auto input = [&](int i) { return offset != 0 ? rows[0] + offset * i : rows[i]; };
  const int centre = taps / 2;
  int k = 0;
  for (; k + 128 <= n; k += 128) {
    const __m512i wc = _mm512_set1_epi16(w[centre]);
    const In* mid = input(centre) + k;
    __m512i s0 = _mm512_mulhrs_epi16(wc, load32(mid));
    __m512i s1 = _mm512_mulhrs_epi16(wc, load32(mid + 32));
    __m512i s2 = _mm512_mulhrs_epi16(wc, load32(mid + 64));
    __m512i s3 = _mm512_mulhrs_epi16(wc, load32(mid + 96));
    for (int i = 0; i < centre; ++i) {
      const __m512i wi = _mm512_set1_epi16(w[i]);
      const In* a = input(i) + k;
      const In* b = input(taps - 1 - i) + k;
      s0 = _mm512_add_epi16(s0, pair_product(wi, a, b));
      s1 = _mm512_add_epi16(s1, pair_product(wi, a + 32, b + 32));
      s2 = _mm512_add_epi16(s2, pair_product(wi, a + 64, b + 64));
      s3 = _mm512_add_epi16(s3, pair_product(wi, a + 96, b + 96));
    }
    store32(s0, out + k);
    store32(s1, out + k + 32);
    store32(s2, out + k + 64);
    store32(s3, out + k + 96);
  }
  for (; k + 32 <= n; k += 32) {
    __m512i sum = _mm512_mulhrs_epi16(_mm512_set1_epi16(w[centre]), load32(input(centre) + k));
    for (int i = 0; i < centre; ++i) {
      sum = _mm512_add_epi16(
          sum, pair_product(_mm512_set1_epi16(w[i]), input(i) + k, input(taps - 1 - i) + k));
    }
    store32(sum, out + k);
  }
  for (; k < n; ++k) {  // the same arithmetic, one value at a time
    const auto at = [&](int i) { return fixed_point(input(i)[k]); };
    int32_t sum = mulhrs(w[centre], at(centre));
    for (int i = 0; i < centre; ++i) sum += mulhrs(w[i], at(i) + at(taps - 1 - i));
    store1(sum, out + k);
  }
}

// Two output rows of the vertical pass from kTaps + 1 ring rows (rows[0] is the first row the
// upper output needs): both rows share kTaps - 1 of their inputs, so each ring row is loaded
// once for both, 12 loads instead of 22 for an 11-tap kernel (33 -> 30 us per blur). The
// inputs stay in registers only when the tap count is known at compile time.
template <int kTaps>
LOOM_AVX512 void vertical_pair(const int16_t* const* rows, const int16_t* w, uint8_t* upper,
                               uint8_t* lower, int n) {
  constexpr int kCentre = kTaps / 2;
  __m512i weight[kCentre + 1];
  for (int i = 0; i <= kCentre; ++i) weight[i] = _mm512_set1_epi16(w[i]);
  int k = 0;
  for (; k + 32 <= n; k += 32) {
    __m512i in[kTaps + 1];
#pragma GCC unroll 32
    for (int i = 0; i <= kTaps; ++i) in[i] = load32(rows[i] + k);
    __m512i a = _mm512_mulhrs_epi16(weight[kCentre], in[kCentre]);
    __m512i b = _mm512_mulhrs_epi16(weight[kCentre], in[kCentre + 1]);
#pragma GCC unroll 32
    for (int i = 0; i < kCentre; ++i) {
      a = _mm512_add_epi16(
          a, _mm512_mulhrs_epi16(weight[i], _mm512_add_epi16(in[i], in[kTaps - 1 - i])));
      b = _mm512_add_epi16(
          b, _mm512_mulhrs_epi16(weight[i], _mm512_add_epi16(in[i + 1], in[kTaps - i])));
    }
    store32(a, upper + k);
    store32(b, lower + k);
  }
  for (; k < n; ++k) {  // the same arithmetic, one value at a time
    for (int r = 0; r < 2; ++r) {
      int32_t sum = mulhrs(w[kCentre], rows[kCentre + r][k]);
      for (int i = 0; i < kCentre; ++i) {
        sum += mulhrs(w[i], rows[i + r][k] + rows[kTaps - 1 - i + r][k]);
      }
      store1(sum, (r == 0 ? upper : lower) + k);
    }
  }
}

#pragma GCC diagnostic pop

// The first 64-byte boundary at or after p (buffers are allocated a line longer).
int16_t* align_to_line(int16_t* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  return reinterpret_cast<int16_t*>((address + 63) & ~uintptr_t{63});
}

// The two-row vertical pass for kernels whose inputs and weights fit the 32 vector registers
// (up to 15 taps: 16 rows, 8 weights, 2 sums); larger kernels filter one row at a time.
using VerticalPair = void (*)(const int16_t* const*, const int16_t*, uint8_t*, uint8_t*, int);
VerticalPair vertical_pair_for(int taps) {
  switch (taps) {
    case 3:
      return vertical_pair<3>;
    case 5:
      return vertical_pair<5>;
    case 7:
      return vertical_pair<7>;
    case 9:
      return vertical_pair<9>;
    case 11:
      return vertical_pair<11>;
    case 13:
      return vertical_pair<13>;
    case 15:
      return vertical_pair<15>;
    default:
      return nullptr;
  }
}

// torchvision's kernel in Q15 (1.0 = 32768, capped at the largest int16).
std::vector<int16_t> q15_kernel(int size, double sigma) {
  std::vector<int16_t> q;
  for (float w : gaussian_kernel(size, sigma)) {
    q.push_back(static_cast<int16_t>(std::min(32767L, std::lround(w * 32768.0))));
  }
  return q;
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
  if (!cpu_has_avx512()) {
    gaussian_blur_reference(image, kernel_height, kernel_width, sigma);
    return;
  }
  const std::vector<int16_t> wy = q15_kernel(kernel_height, sigma);
  const std::vector<int16_t> wx = q15_kernel(kernel_width, sigma);
  const int row_values = w * c;
  uint8_t* base = image.data_ptr<uint8_t>();
  const int64_t stride = image.stride(0);

  // Rows are filtered horizontally into a ring of the last kernel_height + 1 rows, all in L1
  // cache, ahead of the output rows, which are then summed vertically from the ring (two at a
  // time) and written over their input (already consumed). Ring slots start on 64-byte
  // boundaries: the vertical pass then never loads across a cache line, which measured 20% of
  // the whole blur (49 -> 38 us per 224x224x3 image) against wherever malloc put them.
  constexpr int kLineValues = 64 / sizeof(int16_t);
  const int slots = kernel_height + 1;
  const int slot_values = (row_values + kLineValues - 1) / kLineValues * kLineValues;
  thread_local std::vector<int16_t> ring_storage;
  thread_local std::vector<uint8_t> padded;  // one image row with reflected columns either side
  // ring_rows[ry + y]: the slot holding image row y, for y in [-ry, h + ry) (reflected at the
  // edges), so the rows around any output row are consecutive entries.
  thread_local std::vector<const int16_t*> ring_rows;
  ring_storage.resize(static_cast<size_t>(slots) * slot_values + kLineValues);
  padded.resize(static_cast<size_t>(w + 2 * rx) * c);
  ring_rows.resize(static_cast<size_t>(h + 2 * ry));
  int16_t* const ring = align_to_line(ring_storage.data());
  auto slot_of = [&](int row) { return ring + static_cast<size_t>(row % slots) * slot_values; };
  for (int y = -ry; y < h + ry; ++y)
    ring_rows[static_cast<size_t>(y + ry)] = slot_of(reflect(y, h));

  uint8_t* const middle = padded.data() + rx * c;  // column 0
  auto filter_row = [&](int row) {
    std::memcpy(middle, base + row * stride, static_cast<size_t>(row_values));
    for (int p = 1; p <= rx; ++p) {
      for (int ch = 0; ch < c; ++ch) {
        middle[-p * c + ch] = middle[p * c + ch];
        middle[(w - 1 + p) * c + ch] = middle[(w - 1 - p) * c + ch];
      }
    }
    const uint8_t* start = padded.data();
    weighted_sum(&start, c, wx.data(), kernel_width, slot_of(row), row_values);
  };
  int done = -1;  // the last row filtered horizontally
  auto filter_through = [&](int last) {
    while (done < std::min(h - 1, last)) filter_row(++done);
  };
  const VerticalPair pair = vertical_pair_for(kernel_height);
  int y = 0;
  for (; pair != nullptr && y + 2 <= h; y += 2) {
    filter_through(y + 1 + ry);
    pair(&ring_rows[static_cast<size_t>(y)], wy.data(), base + y * stride, base + (y + 1) * stride,
         row_values);
  }
  for (; y < h; ++y) {
    filter_through(y + ry);
    weighted_sum(&ring_rows[static_cast<size_t>(y)], 0, wy.data(), kernel_height, base + y * stride,
                 row_values);
  }
}

}  // namespace loom::data
