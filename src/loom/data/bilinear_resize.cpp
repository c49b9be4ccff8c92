#include "loom/data/bilinear_resize.h"

#include <c10/util/Exception.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "loom/data/avx512.h"

namespace loom::data {
namespace {

// Pixels carry 6 fractional bits in int16 and weights are Q15, as in gaussian_blur.cpp:
// _mm512_mulhrs_epi16(d, f) is d * f rounded back to the pixels' fixed point, and a difference
// of two such pixels (|d| <= 255 x 64) still fits.
constexpr int kFractionBits = 6;
constexpr int kBlock = 32;  // output values per instruction

// Where output position i reads along one axis: the source position `first` and the Q15 weight
// of the one after it (clamped at the edges, where both taps are the edge).
struct AxisTap {
  int first;
  int second;
  int16_t weight;
};

AxisTap axis_tap(int i, int source, int target) {
  const double position = std::max(0.0, (i + 0.5) * source / target - 0.5);
  const int first = std::min(static_cast<int>(position), source - 1);
  if (first == source - 1) return {first, first, 0};
  const auto weight = std::min(32767L, std::lround((position - first) * 32768.0));
  return {first, first + 1, static_cast<int16_t>(weight)};
}

// Per block of 32 output values in a row: the first of 64 blended source values it reads, and
// for each value the positions of its two neighbours among them and the weight of the second.
struct RowPlan {
  std::vector<int> base;
  std::vector<int16_t> first, second, weight;  // kBlock per block
};

// False when a block's neighbours span more than 64 source values. Runs once per image (crops
// differ in size), so it walks pixels and channels with counters rather than dividing.
bool plan_row(int source_width, int target_width, int channels, RowPlan& plan) {
  thread_local std::vector<AxisTap> taps;
  taps.resize(static_cast<size_t>(target_width));
  for (int x = 0; x < target_width; ++x) {
    taps[static_cast<size_t>(x)] = axis_tap(x, source_width, target_width);
  }
  const int values = target_width * channels;
  const int blocks = (values + kBlock - 1) / kBlock;
  plan.base.resize(static_cast<size_t>(blocks));
  plan.first.assign(static_cast<size_t>(blocks) * kBlock, 0);
  plan.second.assign(plan.first.size(), 0);
  plan.weight.assign(plan.first.size(), 0);
  int base = 0;
  for (int k = 0, x = 0, channel = 0; k < values; ++k) {
    const AxisTap& t = taps[static_cast<size_t>(x)];
    if (k % kBlock == 0) {
      base = t.first * channels;
      plan.base[static_cast<size_t>(k / kBlock)] = base;
    }
    const int second = t.second * channels + channel - base;
    if (second >= 2 * kBlock) return false;
    plan.first[static_cast<size_t>(k)] = static_cast<int16_t>(t.first * channels + channel - base);
    plan.second[static_cast<size_t>(k)] = static_cast<int16_t>(second);
    plan.weight[static_cast<size_t>(k)] = t.weight;
    if (++channel == channels) channel = 0, ++x;
  }
  return true;
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12 inside its AVX-512 headers

// Up to 32 bytes (the rest of a row when fewer remain, never reading past it) as fixed point.
LOOM_AVX512 inline __m512i load_pixels(const uint8_t* p, int count) {
  if (count >= kBlock) {
    return _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  return _mm512_cvtepu8_epi16(_mm256_maskz_loadu_epi8((__mmask32{1} << count) - 1, p));
}

// blended[k] = upper[k] + weight * (lower[k] - upper[k]) for the n values of a source row.
LOOM_AVX512 void blend_rows(const uint8_t* upper, const uint8_t* lower, int16_t weight,
                            int16_t* blended, int n) {
  const __m512i w = _mm512_set1_epi16(weight);
  for (int k = 0; k < n; k += kBlock) {
    const __m512i a = load_pixels(upper + k, n - k);
    const __m512i b = load_pixels(lower + k, n - k);
    const __m512i d = _mm512_slli_epi16(_mm512_sub_epi16(b, a), kFractionBits);
    const __m512i v =
        _mm512_add_epi16(_mm512_slli_epi16(a, kFractionBits), _mm512_mulhrs_epi16(d, w));
    _mm512_storeu_si512(blended + k, v);
  }
}

// One output row from a blended source row, a block of 32 values at a time.
LOOM_AVX512 void blend_columns(const int16_t* blended, const RowPlan& plan, uint8_t* out, int n) {
  const __m512i half = _mm512_set1_epi16(1 << (kFractionBits - 1));
  for (size_t b = 0; b < plan.base.size(); ++b) {
    const int16_t* window = blended + plan.base[b];
    const __m512i low = _mm512_loadu_si512(window), high = _mm512_loadu_si512(window + kBlock);
    const size_t at = b * kBlock;
    const __m512i a = _mm512_permutex2var_epi16(low, _mm512_loadu_si512(&plan.first[at]), high);
    const __m512i c = _mm512_permutex2var_epi16(low, _mm512_loadu_si512(&plan.second[at]), high);
    const __m512i v = _mm512_add_epi16(
        a, _mm512_mulhrs_epi16(_mm512_sub_epi16(c, a), _mm512_loadu_si512(&plan.weight[at])));
    const __m512i rounded = _mm512_srai_epi16(_mm512_add_epi16(v, half), kFractionBits);
    const int left = n - static_cast<int>(at);
    const __mmask32 mask = left >= kBlock ? ~__mmask32{0} : (__mmask32{1} << left) - 1;
    _mm256_mask_storeu_epi8(out + at, mask, _mm512_cvtusepi16_epi8(rounded));
  }
}

#pragma GCC diagnostic pop

}  // namespace

bool resize_bilinear_avx512(const at::Tensor& image, at::Tensor out) {
  const int source_height = static_cast<int>(image.size(0));
  const int source_width = static_cast<int>(image.size(1));
  const int target_height = static_cast<int>(out.size(0));
  const int target_width = static_cast<int>(out.size(1));
  const int channels = static_cast<int>(image.size(2));
  TORCH_CHECK(image.stride(2) == 1 && image.stride(1) == channels && out.stride(2) == 1 &&
                  out.stride(1) == channels,
              "resize: image rows must be packed");
  if (!cpu_has_avx512() || source_height <= 0 || source_width <= 0) return false;
  thread_local RowPlan plan;
  if (!plan_row(source_width, target_width, channels, plan)) return false;

  // The blended row, with a block of slack after it: the last blocks load 64 values from
  // their base whether or not they use them all.
  const int source_values = source_width * channels;
  thread_local std::vector<int16_t> blended;
  blended.resize(static_cast<size_t>(source_values + 2 * kBlock));
  const auto* in = image.data_ptr<uint8_t>();
  auto* to = out.data_ptr<uint8_t>();
  const int64_t in_stride = image.stride(0), out_stride = out.stride(0);
  for (int y = 0; y < target_height; ++y) {
    const AxisTap t = axis_tap(y, source_height, target_height);
    blend_rows(in + t.first * in_stride, in + t.second * in_stride, t.weight, blended.data(),
               source_values);
    blend_columns(blended.data(), plan, to + y * out_stride, target_width * channels);
  }
  return true;
}

}  // namespace loom::data
