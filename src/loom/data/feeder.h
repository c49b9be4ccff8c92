// Turns a uint8 NHWC batch into the model's input in one pass: float, normalised per channel,
// in the requested memory layout. Autocast (bf16) casts inside the model, so input stays fp32.
#pragma once

#include <ATen/ATen.h>

#include "loom/data/image_set.h"

namespace loom::data {

class Feeder {
 public:
  Feeder(const ChannelStats& stats, at::MemoryFormat format);

  at::Tensor to_input(const at::Tensor& images_nhwc) const;

 private:
  at::Tensor scale_;  // [1, C, 1, 1]: 1 / (255 * std)
  at::Tensor shift_;  // [1, C, 1, 1]: -mean / std
  at::MemoryFormat format_;
};

}  // namespace loom::data
