#include "loom/data/image_set.h"

namespace loom::data {

ChannelStats channel_stats(const ImageSet& set) {
  // Double accumulation over [N*H*W, C]: exact enough for normalisation constants.
  at::Tensor pixels = set.images.reshape({-1, set.channels()}).to(at::kDouble).div_(255.0);
  at::Tensor mean = pixels.mean(0);
  at::Tensor stddev = pixels.std(0).clamp_min(1e-6);
  ChannelStats stats;
  for (int64_t c = 0; c < set.channels(); ++c) {
    stats.mean.push_back(mean[c].item<double>());
    stats.stddev.push_back(stddev[c].item<double>());
  }
  return stats;
}

}  // namespace loom::data
