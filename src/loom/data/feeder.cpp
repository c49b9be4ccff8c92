#include "loom/data/feeder.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <algorithm>
#include <vector>

#include "loom/core/batch_memory.h"
#include "loom/core/cpu_capability.h"
#include "loom/core/device.h"
#include "loom/core/error.h"

namespace loom::data {

Feeder::Feeder(const ChannelStats& stats, at::MemoryFormat format, at::Device device)
    : format_(format), device_(device) {
  if (device.is_cuda() && cuda_availability().devices == 0) {
    throw Error(
        "feeder: device '" + device.str() + "' needs a GPU, and " + cuda_availability().why_not,
        {{"problem", "no_cuda"}, {"value", device.str()}});
  }
  if (!device.is_cpu() && !device.is_cuda()) {
    throw Error("feeder: device '" + device.str() + "' is not supported (cpu or cuda)",
                {{"problem", "device"}, {"value", device.str()}, {"allowed", "cpu, cuda"}});
  }
  const int64_t c = static_cast<int64_t>(stats.mean.size());
  scale_ = at::empty({1, c, 1, 1}, at::kFloat);
  shift_ = at::empty({1, c, 1, 1}, at::kFloat);
  for (int64_t i = 0; i < c; ++i) {
    scale_[0][i] = 1.0 / (255.0 * stats.stddev[i]);
    shift_[0][i] = -stats.mean[i] / stats.stddev[i];
  }
  if (device.is_cuda()) {
    scale_ = scale_.to(device);
    shift_ = shift_.to(device);
    copy_stream_ = c10::impl::VirtualGuardImpl(device.type()).getStreamFromGlobalPool(device);
  }
}

at::Device parse_feed_device(const std::string& text, const std::string& option) {
  return resolve_device(text, /*local_rank=*/0, option);
}

namespace {

// The two conversions' inner loops, vectorised by the compiler for each instruction set
// (kernel_for: AVX-512, AVX2, portable); the project itself is built for baseline x86-64.

// dst[k * period + j] = src[k * period + j] * s[j] + b[j] for `blocks` blocks.
LOOM_ALWAYS_INLINE void scale_shift_blocks(const uint8_t* __restrict src, float* __restrict dst,
                                           const float* __restrict s, const float* __restrict b,
                                           int64_t period, int64_t blocks) {
  for (int64_t k = 0; k < blocks; ++k) {
    for (int64_t j = 0; j < period; ++j) {
      dst[k * period + j] = static_cast<float>(src[k * period + j]) * s[j] + b[j];
    }
  }
}

// Three planes from `count` interleaved RGB pixels, each scaled and shifted: with the channel
// count known, the compiler deinterleaves the bytes with shuffles, where the strided loop per
// channel below stays scalar (a Python loader's NCHW batches went from 0.83 to 0.96 of
// `loom data bench`'s rate, bench/loader_epochs.py).
LOOM_ALWAYS_INLINE void rgb_to_planes(const uint8_t* __restrict src, float* __restrict red,
                                      float* __restrict green, float* __restrict blue,
                                      const float* __restrict coefficients, int64_t count) {
  const float s0 = coefficients[0], s1 = coefficients[1], s2 = coefficients[2];
  const float b0 = coefficients[3], b1 = coefficients[4], b2 = coefficients[5];
  for (int64_t p = 0; p < count; ++p) {
    red[p] = static_cast<float>(src[3 * p]) * s0 + b0;
    green[p] = static_cast<float>(src[3 * p + 1]) * s1 + b1;
    blue[p] = static_cast<float>(src[3 * p + 2]) * s2 + b2;
  }
}

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
  static const auto blocks_kernel = kernel_for<scale_shift_blocks>(cpu_capability());
  at::parallel_for(0, blocks, 64, [&](int64_t begin, int64_t end) {
    blocks_kernel(in + begin * period, out + begin * period, s.data(), b.data(), period,
                  end - begin);
  });
  for (int64_t i = blocks * period; i < count; ++i) {
    out[i] = static_cast<float>(in[i]) * s[i % period] + b[i % period];
  }
}

// out[n][c][p] = in[n][p][c] * scale[c] + shift[c]: NHWC bytes to contiguous NCHW floats in one
// pass. Blocks of pixels keep their input bytes in cache while each channel's plane is written.
void normalize_nhwc_to_nchw(const uint8_t* in, float* out, int64_t images, int64_t pixels,
                            const float* scale, const float* shift, int64_t channels) {
  constexpr int64_t kBlock = 4096;  // pixels: 12 KB of RGB input
  const int64_t blocks_per_image = (pixels + kBlock - 1) / kBlock;
  static const auto rgb_kernel = kernel_for<rgb_to_planes>(cpu_capability());
  const float coefficients[6] = {
      scale[0], channels > 1 ? scale[1] : 0, channels > 2 ? scale[2] : 0,
      shift[0], channels > 1 ? shift[1] : 0, channels > 2 ? shift[2] : 0};
  at::parallel_for(0, images * blocks_per_image, 1, [&](int64_t begin, int64_t end) {
    for (int64_t job = begin; job < end; ++job) {
      const int64_t n = job / blocks_per_image;
      const int64_t first = (job % blocks_per_image) * kBlock;
      const int64_t count = std::min(kBlock, pixels - first);
      const uint8_t* src = in + (n * pixels + first) * channels;
      if (channels == 3) {
        float* plane = out + n * 3 * pixels + first;
        rgb_kernel(src, plane, plane + pixels, plane + 2 * pixels, coefficients, count);
        continue;
      }
      for (int64_t c = 0; c < channels; ++c) {
        float* dst = out + (n * channels + c) * pixels + first;
        const float s = scale[c], b = shift[c];
        for (int64_t p = 0; p < count; ++p)
          dst[p] = static_cast<float>(src[p * channels + c]) * s + b;
      }
    }
  });
}

}  // namespace

at::Tensor Feeder::to_input(const at::Tensor& inputs) const {
  // Token ids (and any input that is not pixels) go to the model as they are.
  if (inputs.scalar_type() != at::kByte || inputs.dim() != 4) return to_device(inputs);
  return device_.is_cpu() ? on_cpu(inputs) : on_device(inputs);
}

at::Tensor Feeder::to_device(const at::Tensor& t) const {
  return !t.defined() || t.device() == device_ ? t : t.to(device_, /*non_blocking=*/true);
}

at::Tensor Feeder::on_cpu(const at::Tensor& images_nhwc) const {
  const int64_t channels = images_nhwc.size(3);
  if (format_ == at::MemoryFormat::ChannelsLast || channels == 1) {
    // The output's memory order is the input's (NHWC): one fused pass, no layout change.
    at::Tensor in = images_nhwc.contiguous();
    at::Tensor out = empty_batch_tensor({in.size(0), channels, in.size(1), in.size(2)}, at::kFloat,
                                        at::MemoryFormat::ChannelsLast);
    normalize_nhwc(in.data_ptr<uint8_t>(), out.data_ptr<float>(), in.numel(),
                   scale_.data_ptr<float>(), shift_.data_ptr<float>(), channels);
    // One channel: channels_last and contiguous are the same memory order.
    return format_ == at::MemoryFormat::ChannelsLast || channels == 1 ? out : out.contiguous();
  }
  // Contiguous NCHW from NHWC is a transpose, fused with the scale and shift into one pass.
  at::Tensor in = images_nhwc.contiguous();
  at::Tensor out = empty_batch_tensor({in.size(0), channels, in.size(1), in.size(2)}, at::kFloat);
  normalize_nhwc_to_nchw(in.data_ptr<uint8_t>(), out.data_ptr<float>(), in.size(0),
                         in.size(1) * in.size(2), scale_.data_ptr<float>(),
                         shift_.data_ptr<float>(), channels);
  return out;
}

at::Tensor Feeder::on_device(const at::Tensor& images_nhwc) const {
  const c10::impl::VirtualGuardImpl guard(device_.type());
  const c10::Stream compute = guard.getStream(device_);
  at::Tensor staged;
  {
    // Asynchronous for pinned memory; from pageable memory the copy still works, synchronously.
    const c10::StreamGuard on_copy_stream(*copy_stream_);
    staged = images_nhwc.to(at::TensorOptions().device(device_), /*non_blocking=*/true);
  }
  c10::Event copied(device_.type());
  copied.record(*copy_stream_);
  copied.block(compute);
  // Allocated on the copy stream, used (and freed) on the compute stream: tell the caching
  // allocator, or it could hand the memory out again while the conversion still reads it.
  staged.record_stream(compute);
  // One kernel converts to float and, for the contiguous layout, transposes; NHWC viewed as NCHW
  // is already channels_last.
  const at::Tensor nchw = staged.permute({0, 3, 1, 2});
  at::Tensor out =
      at::empty(nchw.sizes(), at::TensorOptions().dtype(at::kFloat).device(device_), format_);
  out.copy_(nchw);
  return out.mul_(scale_).add_(shift_);
}

}  // namespace loom::data
