#include "loom/models/draw_key.h"

#include <ATen/Parallel.h>

#include <vector>

namespace loom::models {
namespace {

constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;  // SplitMix64's increment

}  // namespace

at::Tensor dropout_mask(at::IntArrayRef sizes, double p, const at::TensorOptions& options) {
  DrawState& s = DrawKeyScope::state();
  if (!s.samples) return at::dropout(at::ones(sizes, options), p, /*train=*/true);
  const uint64_t draw = static_cast<uint64_t>(s.draws++);
  at::Tensor mask = at::empty(sizes, at::kFloat);
  const int64_t rows = mask.size(0), per_row = rows > 0 ? mask.numel() / rows : 0;
  std::vector<uint64_t> streams(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    streams[static_cast<size_t>(r)] =
        hash_key({s.samples->of_row(r), static_cast<uint64_t>(s.block), draw});
  }
  // An element is kept where the top 24 bits of its draw fall below (1 - p) 2^24: p to 2^-24.
  const uint64_t kept_below = static_cast<uint64_t>((1.0 - p) * static_cast<double>(1 << 24));
  const float kept = static_cast<float>(1.0 / (1.0 - p));
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
