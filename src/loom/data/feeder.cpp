#include "loom/data/feeder.h"

#include <ATen/Parallel.h>

#include <vector>

namespace loom::data {

Feeder::Feeder(const ChannelStats& stats, at::MemoryFormat format) : format_(format) {
  const int64_t c = static_cast<int64_t>(stats.mean.size());
  scale_ = at::empty({1, c, 1, 1}, at::kFloat);
  shift_ = at::empty({1, c, 1, 1}, at::kFloat);
  for (int64_t i = 0; i < c; ++i) {
    scale_[0][i] = 1.0 / (255.0 * stats.stddev[i]);
    shift_[0][i] = -stats.mean[i] / stats.stddev[i];
  }
}

namespace {

// out = in * scale[c] + shift[c] over NHWC memory in a single pass. The coefficients repeat every
// C values; unrolling them over a period of 16 * C lets the compiler vectorise the loop.
void normalize_nhwc(const uint8_t* in, float* out, int64_t count, const float* scale,
                    const float* shift, int64_t channels) {
  constexpr int64_t kRepeats = 16;
  const int64_t period = kRepeats * channels;
  std::vector<float> s(period), b(period);
  for (int64_t j = 0; j < period; ++j) {
    s[j] = scale[j % channels];
    b[j] = shift[j % channels];
  }
  const int64_t blocks = count / period;
  at::parallel_for(0, blocks, 64, [&](int64_t begin, int64_t end) {
    for (int64_t blk = begin; blk < end; ++blk) {
      const uint8_t* src = in + blk * period;
      float* dst = out + blk * period;
      for (int64_t j = 0; j < period; ++j) dst[j] = static_cast<float>(src[j]) * s[j] + b[j];
    }
  });
  for (int64_t i = blocks * period; i < count; ++i) {
    out[i] = static_cast<float>(in[i]) * s[i % period] + b[i % period];
  }
}

}  // namespace

at::Tensor Feeder::to_input(const at::Tensor& images_nhwc) const {
  const int64_t channels = images_nhwc.size(3);
  if (format_ == at::MemoryFormat::ChannelsLast || channels == 1) {
    // The output's memory order is the input's (NHWC): one fused pass, no layout change.
    at::Tensor in = images_nhwc.contiguous();
    at::Tensor out =
        at::empty({in.size(0), channels, in.size(1), in.size(2)},
                  at::TensorOptions().dtype(at::kFloat), at::MemoryFormat::ChannelsLast);
    normalize_nhwc(in.data_ptr<uint8_t>(), out.data_ptr<float>(), in.numel(),
                   scale_.data_ptr<float>(), shift_.data_ptr<float>(), channels);
    return format_ == at::MemoryFormat::ChannelsLast ? out : out.contiguous();
  }
  // Contiguous NCHW from NHWC is a transpose: copy into the target layout, then scale and shift
  // (three passes; only models that asked for the contiguous layout take this path).
  at::Tensor nchw = images_nhwc.permute({0, 3, 1, 2});
  at::Tensor out = at::empty(nchw.sizes(), at::TensorOptions().dtype(at::kFloat), format_);
  out.copy_(nchw);
  return out.mul_(scale_).add_(shift_);
}

}  // namespace loom::data
