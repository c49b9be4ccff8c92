#include "loom/data/bilinear_resize.h"

#include <c10/util/Exception.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "loom/data/int16_lanes.h"

namespace loom::data {
namespace {

// Pixels carry 6 fractional bits in int16 and weights are Q15 (int16_lanes.h): mulhrs(d, w) is
// d * w rounded back to the pixels' fixed point, and a difference of two such pixels
// (|d| <= 255 x 64) still fits.
using lanes::kFractionBits;

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

// For each value of an output row: where its two neighbours are in the blended source row and
// the weight of the second. The row's plan, made once per image (crops differ in size).
struct RowTaps {
  std::vector<int> first, second;
  std::vector<int16_t> weight;
};

void plan_taps(int source_width, int target_width, int channels, RowTaps& taps) {
  const size_t values = static_cast<size_t>(target_width) * channels;
  taps.first.resize(values);
  taps.second.resize(values);
  taps.weight.resize(values);
  for (int x = 0, k = 0; x < target_width; ++x) {
    const AxisTap t = axis_tap(x, source_width, target_width);
    for (int c = 0; c < channels; ++c, ++k) {
      taps.first[static_cast<size_t>(k)] = t.first * channels + c;
      taps.second[static_cast<size_t>(k)] = t.second * channels + c;
      taps.weight[static_cast<size_t>(k)] = t.weight;
    }
  }
}

// The same taps in blocks of `kBlock` output values, each block reading a window of `kWindow`
// consecutive source entries from `base` (its first value's pixel, the lowest any of its values
// reads): the layout the vector paths pick neighbours by. Short final blocks are padded with
// entries that read the window's start. With `kPairs` each window entry holds both neighbours
// (the AVX2 path), so only the first must lie in the window.
template <int kBlock, int kWindow, typename Index, bool kPairs>
struct BlockPlan {
  std::vector<int> base;
  std::vector<Index> first, second;
  std::vector<int16_t> weight;

  // False when some block's neighbours lie beyond its window (a strong horizontal shrink).
  bool plan(const RowTaps& taps, int channels, int blocks_multiple) {
    const int values = static_cast<int>(taps.first.size());
    int blocks = (values + kBlock - 1) / kBlock;
    blocks = (blocks + blocks_multiple - 1) / blocks_multiple * blocks_multiple;
    base.assign(static_cast<size_t>(blocks), 0);
    first.assign(static_cast<size_t>(blocks) * kBlock, 0);
    second.assign(first.size(), 0);
    weight.assign(first.size(), 0);
    for (int k = 0; k < values; ++k) {
      const auto at = static_cast<size_t>(k);
      if (k % kBlock == 0) base[at / kBlock] = taps.first[at] - taps.first[at] % channels;
      const int from = base[at / kBlock];
      if ((kPairs ? taps.first[at] : taps.second[at]) - from >= kWindow) return false;
      first[at] = static_cast<Index>(taps.first[at] - from);
      second[at] = static_cast<Index>(taps.second[at] - from);
      weight[at] = taps.weight[at];
    }
    return true;
  }
};

// One value at a time: the arithmetic every vector path does, lane by lane. The taps are read
// through local pointers: `out` is bytes, which may alias anything, so the compiler would
// otherwise reload the vectors' data pointers for every value (600 -> 357 us a 224x224x3 image).
void blend_columns_portable(const int16_t* blended, const RowTaps& taps, uint8_t* out, int n) {
  const int* first = taps.first.data();
  const int* second = taps.second.data();
  const int16_t* weight = taps.weight.data();
  for (int k = 0; k < n; ++k) {
    const int a = blended[first[k]], c = blended[second[k]];
    const int v = a + lanes::mulhrs(c - a, weight[k]);
    const int level = (v + (1 << (kFractionBits - 1))) >> kFractionBits;
    out[k] = static_cast<uint8_t>(level < 0 ? 0 : level > 255 ? 255 : level);
  }
}

#define LOOM_PER_INSTRUCTION_SET_FILE "loom/data/bilinear_resize_rows.inc"
#include "loom/data/per_instruction_set.inc"
#undef LOOM_PER_INSTRUCTION_SET_FILE

#if defined(__x86_64__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12 inside its AVX-512 headers

// AVX-512: blocks of 32 output values, each picking its two neighbours out of 64 consecutive
// blended values with one two-register permute.
using Avx512Plan = BlockPlan<32, 64, int16_t, false>;

LOOM_TARGET_AVX512 void blend_columns_avx512(const int16_t* blended, const Avx512Plan& plan,
                                             uint8_t* out, int n) {
  using L = lanes::Avx512;
  for (size_t b = 0; b < plan.base.size(); ++b) {
    const int16_t* window = blended + plan.base[b];
    const __m512i low = _mm512_loadu_si512(window), high = _mm512_loadu_si512(window + 32);
    const size_t at = b * 32;
    const __m512i a = _mm512_permutex2var_epi16(low, _mm512_loadu_si512(&plan.first[at]), high);
    const __m512i c = _mm512_permutex2var_epi16(low, _mm512_loadu_si512(&plan.second[at]), high);
    const __m512i v = _mm512_add_epi16(
        a, _mm512_mulhrs_epi16(_mm512_sub_epi16(c, a), _mm512_loadu_si512(&plan.weight[at])));
    const int left = n - static_cast<int>(at);
    if (left >= 32) {
      L::store_bytes(v, out + at);
    } else {
      L::store_bytes(v, out + at, left);
    }
  }
}

// AVX2 has no 16-bit permute across the register: the blended row is rewritten as 32-bit pairs
// (value k, value k + channels: the same channel of the next pixel), so that one 32-bit permute
// fetches both neighbours of an output value and one multiply-add with (-w, w) gives
// (c - a) * w. Blocks of 8 output values pick from 16 consecutive pairs (two permutes), or 24
// (three) where a stronger shrink needs them.
template <int kParts>
using Avx2Plan = BlockPlan<8, 8 * kParts, int32_t, true>;

LOOM_TARGET_AVX2 void make_pairs(const int16_t* blended, int channels, int n, int32_t* pairs) {
  for (int k = 0; k < n; k += 16) {
    const auto* v = reinterpret_cast<const __m256i*>(blended + k);
    const auto* next = reinterpret_cast<const __m256i*>(blended + k + channels);
    const __m256i a = _mm256_loadu_si256(v), c = _mm256_loadu_si256(next);
    // unpack interleaves within each 128-bit half: lo holds pairs 0-3 and 8-11, hi 4-7, 12-15.
    const __m256i lo = _mm256_unpacklo_epi16(a, c), hi = _mm256_unpackhi_epi16(a, c);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(pairs + k),
                        _mm256_permute2x128_si256(lo, hi, 0x20));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(pairs + k + 8),
                        _mm256_permute2x128_si256(lo, hi, 0x31));
  }
}

LOOM_TARGET_AVX2 inline __m256i load8(const int32_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// Eight output values in the pixels' fixed point, as 32-bit lanes: a + mulhrs(c - a, w).
template <int kParts>
LOOM_TARGET_AVX2 inline __m256i blend_block(const int32_t* pairs, const Avx2Plan<kParts>& plan,
                                            const int32_t* pair_weights, size_t b) {
  const int32_t* window = pairs + plan.base[b];
  const __m256i index = load8(&plan.first[b * 8]);
  __m256i pair = _mm256_permutevar8x32_epi32(load8(window), index);
  for (int part = 1; part < kParts; ++part) {
    const __m256i from = _mm256_permutevar8x32_epi32(load8(window + 8 * part), index);
    const __m256i beyond = _mm256_cmpgt_epi32(index, _mm256_set1_epi32(8 * part - 1));
    pair = _mm256_blendv_epi8(pair, from, beyond);
  }
  const __m256i product = _mm256_madd_epi16(pair, load8(pair_weights + b * 8));
  const __m256i half = _mm256_set1_epi32(1 << 14);
  const __m256i rounded = _mm256_srai_epi32(_mm256_add_epi32(product, half), 15);
  const __m256i a = _mm256_srai_epi32(_mm256_slli_epi32(pair, 16), 16);
  return _mm256_add_epi32(a, rounded);
}

// (-w, w) as int16 pairs, one 32-bit lane per output value.
void pair_weights(const std::vector<int16_t>& weight, std::vector<int32_t>& out) {
  out.resize(weight.size());
  for (size_t k = 0; k < weight.size(); ++k) {
    const auto w = static_cast<uint16_t>(weight[k]);
    out[k] = static_cast<int32_t>(static_cast<uint16_t>(-w) | static_cast<uint32_t>(w) << 16);
  }
}

template <int kParts>
LOOM_TARGET_AVX2 void blend_columns_avx2(const int32_t* pairs, const Avx2Plan<kParts>& plan,
                                         const int32_t* weights, uint8_t* out, int n) {
  using L = lanes::Avx2;
  for (size_t b = 0; b < plan.base.size(); b += 2) {  // the plan has an even block count
    const __m256i packed = _mm256_packs_epi32(blend_block<kParts>(pairs, plan, weights, b),
                                              blend_block<kParts>(pairs, plan, weights, b + 1));
    const __m256i v = _mm256_permute4x64_epi64(packed, 0xD8);  // packs works per 128-bit half
    const int at = static_cast<int>(b * 8), left = n - at;
    if (left >= 16) {
      L::store_bytes(v, out + at);
    } else {
      L::store_bytes(v, out + at, left);
    }
  }
}

#pragma GCC diagnostic pop
#endif  // __x86_64__

}  // namespace

void resize_bilinear(const at::Tensor& image, at::Tensor out, CpuCapability path) {
  const int source_height = static_cast<int>(image.size(0));
  const int source_width = static_cast<int>(image.size(1));
  const int target_height = static_cast<int>(out.size(0));
  const int target_width = static_cast<int>(out.size(1));
  const int channels = static_cast<int>(image.size(2));
  TORCH_CHECK(image.stride(2) == 1 && image.stride(1) == channels && out.stride(2) == 1 &&
                  out.stride(1) == channels && out.size(2) == channels,
              "resize: image rows must be packed, with the same channels in and out");
  TORCH_CHECK(source_height > 0 && source_width > 0, "resize: the source image is empty");
  thread_local RowTaps taps;
  plan_taps(source_width, target_width, channels, taps);
  const int source_values = source_width * channels;
  const int target_values = target_width * channels;

  // The blended row, with slack after it: vector loads and stores run past its end.
  thread_local std::vector<int16_t> blended;
  blended.resize(static_cast<size_t>(source_values + 128 + channels));
  auto blend_rows = portable::blend_rows;
  enum class Columns { kAvx512, kAvx2Narrow, kAvx2Wide, kPortable } columns = Columns::kPortable;
#if defined(__x86_64__)
  thread_local Avx512Plan plan512;
  thread_local Avx2Plan<2> narrow;
  thread_local Avx2Plan<3> wide;
  thread_local std::vector<int32_t> weights2, pairs;
  blend_rows = for_capability(path, avx512::blend_rows, avx2::blend_rows, portable::blend_rows);
  if (path == CpuCapability::kAvx512 && plan512.plan(taps, channels, 1)) {
    columns = Columns::kAvx512;
  } else if (path >= CpuCapability::kAvx2 && narrow.plan(taps, channels, 2)) {
    columns = Columns::kAvx2Narrow;
    pair_weights(narrow.weight, weights2);
  } else if (path >= CpuCapability::kAvx2 && wide.plan(taps, channels, 2)) {
    columns = Columns::kAvx2Wide;
    pair_weights(wide.weight, weights2);
  }
  if (columns == Columns::kAvx2Narrow || columns == Columns::kAvx2Wide) {
    pairs.resize(static_cast<size_t>(source_values + 64));
  }
#endif
  const auto* in = image.data_ptr<uint8_t>();
  auto* to = out.data_ptr<uint8_t>();
  const int64_t in_stride = image.stride(0), out_stride = out.stride(0);
  for (int y = 0; y < target_height; ++y) {
    const AxisTap t = axis_tap(y, source_height, target_height);
    blend_rows(in + t.first * in_stride, in + t.second * in_stride, t.weight, blended.data(),
               source_values);
    uint8_t* row = to + y * out_stride;
    switch (columns) {
#if defined(__x86_64__)
      case Columns::kAvx512:
        blend_columns_avx512(blended.data(), plan512, row, target_values);
        break;
      case Columns::kAvx2Narrow:
        make_pairs(blended.data(), channels, source_values, pairs.data());
        blend_columns_avx2<2>(pairs.data(), narrow, weights2.data(), row, target_values);
        break;
      case Columns::kAvx2Wide:
        make_pairs(blended.data(), channels, source_values, pairs.data());
        blend_columns_avx2<3>(pairs.data(), wide, weights2.data(), row, target_values);
        break;
#endif
      default:
        blend_columns_portable(blended.data(), taps, row, target_values);
    }
  }
}

}  // namespace loom::data
