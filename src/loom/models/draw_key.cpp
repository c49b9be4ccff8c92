#include "loom/models/draw_key.h"

#include <ATen/Parallel.h>
#include <c10/util/accumulate.h>

#include <cstring>
#include <vector>

namespace loom::models {
namespace {

constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;  // SplitMix64's increment

// x >> k as an unsigned 64-bit shift, on int64 tensors (ATen's shifts of signed types keep the
// sign; its uint64 tensors cannot add or shift).
at::Tensor shift_right(const at::Tensor& x, int64_t k) {
  return x.bitwise_right_shift(k).bitwise_and((int64_t{1} << (64 - k)) - 1);
}

// The signed integer with `u`'s bits: int64 tensors add and multiply modulo 2^64 as uint64 does.
int64_t bits_of(uint64_t u) {
  int64_t i;
  std::memcpy(&i, &u, sizeof i);
  return i;
}

}  // namespace

at::Tensor keyed_mask_with_tensor_ops(const std::vector<uint64_t>& streams, int64_t per_row,
                                      uint64_t kept_below, float kept, at::Device device) {
  const auto longs = at::TensorOptions().dtype(at::kLong).device(device);
  std::vector<int64_t> keys(streams.size());
  for (size_t r = 0; r < streams.size(); ++r) keys[r] = bits_of(streams[r]);
  const auto rows = static_cast<int64_t>(keys.size());
  // mix64(stream + j kGolden) for element j of each row, as the CPU's loop computes it.
  at::Tensor x = at::tensor(keys, at::kLong).to(device).view({rows, 1}) +
                 at::arange(per_row, longs).mul(bits_of(kGolden)).view({1, per_row});
  x = x + bits_of(kGolden);
  x = x.bitwise_xor(shift_right(x, 30)).mul(bits_of(0xbf58476d1ce4e5b9ULL));
  x = x.bitwise_xor(shift_right(x, 27)).mul(bits_of(0x94d049bb133111ebULL));
  x = x.bitwise_xor(shift_right(x, 31));
  const at::Tensor keep = shift_right(x, 40).lt(static_cast<int64_t>(kept_below));
  return keep.to(at::kFloat).mul_(kept);
}

at::Tensor dropout_mask(at::IntArrayRef sizes, double p, const at::TensorOptions& options) {
  DrawState& s = DrawKeyScope::state();
  if (!s.samples) return at::dropout(at::ones(sizes, options), p, /*train=*/true);
  const uint64_t draw = static_cast<uint64_t>(s.draws++);
  const int64_t rows = sizes.empty() ? 1 : sizes[0];
  const int64_t numel = c10::multiply_integers(sizes);
  const int64_t per_row = rows > 0 ? numel / rows : 0;
  std::vector<uint64_t> streams(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    streams[static_cast<size_t>(r)] =
        hash_key({s.samples->of_row(r), static_cast<uint64_t>(s.block), draw});
  }
  // An element is kept where the top 24 bits of its draw fall below (1 - p) 2^24: p to 2^-24.
  const uint64_t kept_below = static_cast<uint64_t>((1.0 - p) * static_cast<double>(1 << 24));
  const float kept = static_cast<float>(1.0 / (1.0 - p));
  // Another device draws its mask where it is used, by tensor operations: the same values, and
  // no mask crosses from the host.
  if (!options.device().is_cpu()) {
    return keyed_mask_with_tensor_ops(streams, per_row, kept_below, kept, options.device())
        .view(sizes)
        .to(options);
  }
  at::Tensor mask = at::empty(sizes, at::kFloat);
  float* out = mask.data_ptr<float>();
  // Elements of a CPU generator's bernoulli_ are drawn one after another; these are independent.
  at::parallel_for(0, rows * per_row, 1 << 15, [&](int64_t begin, int64_t end) {
    int64_t r = begin / per_row, j = begin - r * per_row;
    for (int64_t i = begin; i < end; ++i) {
      const uint64_t bits =
          mix64(streams[static_cast<size_t>(r)] + static_cast<uint64_t>(j) * kGolden);
      out[i] = (bits >> 40) < kept_below ? kept : 0.0f;
      if (++j == per_row) j = 0, ++r;
    }
  });
  return mask.to(options);
}

}  // namespace loom::models
