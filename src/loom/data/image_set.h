// An in-memory labelled image set: the form IDX files and synthetic data take once loaded.
#pragma once

#include <ATen/ATen.h>

#include <string>
#include <vector>

namespace loom::data {

struct ImageSet {
  at::Tensor images;  // uint8 [N, H, W, C]
  at::Tensor labels;  // int64 [N]
  int64_t classes = 0;

  int64_t size() const { return images.size(0); }
  int64_t height() const { return images.size(1); }
  int64_t width() const { return images.size(2); }
  int64_t channels() const { return images.size(3); }
};

// Per-channel mean and standard deviation of the pixel values scaled to [0, 1].
struct ChannelStats {
  std::vector<double> mean, stddev;
};
ChannelStats channel_stats(const ImageSet& set);

}  // namespace loom::data
