// Turns a uint8 NHWC batch into the model's input in one pass: float, normalised per channel,
// in the requested memory layout, on the training device. Autocast (bf16) casts inside the
// model, so input stays fp32.
//
// On the CPU the conversion is one fused, vectorised pass over NHWC memory. On a CUDA device
// (a CUDA build of LibTorch; checked at construction) the batch crosses as uint8, a quarter of
// the bytes of float, with a non-blocking copy on a side stream, from pinned memory when the
// loader pinned it (LoaderOptions::pin_memory), and is normalised on the device. The compute
// stream waits for the copy through an event rather than the host waiting, so to_input()
// returns at once and the copy of batch k+1 runs while the device is still busy with step k.
// The CPU path is the tested one: libloom links LibTorch's CPU libraries only, and the CUDA path
// has not been run (bench/RESULTS.md says so until it has).
//
// Threading: to_input() is called from one thread (the trainer's).
#pragma once

#include <ATen/ATen.h>
#include <c10/core/Stream.h>

#include <optional>
#include <string>

#include "loom/data/image_set.h"

namespace loom::data {

class Feeder {
 public:
  // Throws Error for a CUDA device when this LibTorch has no CUDA, or for another device type.
  Feeder(const ChannelStats& stats, at::MemoryFormat format, at::Device device = at::kCPU);

  // Images (uint8 [B, H, W, C]) normalised as above; other inputs (token ids) moved to the
  // device as they are.
  at::Tensor to_input(const at::Tensor& inputs) const;
  // Another tensor of a batch (its targets) on the device as it is, copied without the host
  // waiting where the device allows.
  at::Tensor to_device(const at::Tensor& t) const;
  at::Device device() const { return device_; }

 private:
  at::Tensor on_cpu(const at::Tensor& images_nhwc) const;
  at::Tensor on_device(const at::Tensor& images_nhwc) const;

  at::Tensor scale_;  // [1, C, 1, 1] on device_: 1 / (255 * std)
  at::Tensor shift_;  // [1, C, 1, 1] on device_: -mean / std
  at::MemoryFormat format_;
  at::Device device_;
  std::optional<c10::Stream> copy_stream_;  // CUDA: the side stream host-to-device copies use
};

// Parses "auto", "cpu", "cuda" or "cuda:N" (resolve_device, core/device.h: "cuda" and "auto" mean
// CUDA device 0) and checks that this process can use it; throws ConfigError naming `key`
// otherwise.
at::Device parse_feed_device(const std::string& text, const std::string& key);

}  // namespace loom::data
