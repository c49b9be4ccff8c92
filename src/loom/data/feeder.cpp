#include "loom/data/feeder.h"

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

at::Tensor Feeder::to_input(const at::Tensor& images_nhwc) const {
  // NHWC viewed as NCHW already has channels_last strides; allocate the output in the target
  // layout and let one fused multiply-add do the conversion.
  at::Tensor nchw = images_nhwc.permute({0, 3, 1, 2});
  at::Tensor out = at::empty(nchw.sizes(), at::TensorOptions().dtype(at::kFloat), format_);
  out.copy_(nchw);
  return out.mul_(scale_).add_(shift_);
}

}  // namespace loom::data
