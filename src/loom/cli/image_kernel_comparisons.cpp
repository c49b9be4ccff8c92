// The input pipeline's per-image kernels against torch's: bilinear resize, Gaussian blur, and
// the feeder's uint8 -> normalised float conversion. Each image is one task of at::parallel_for
// on both sides (a loader thread's unit of work); torch's operators inside a parallel region run
// on their calling thread, as Loom's kernels do.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "loom/cli/kernel_comparisons.h"
#include "loom/data/bilinear_resize.h"
#include "loom/data/feeder.h"
#include "loom/data/gaussian_blur.h"

namespace loom::cli {
namespace {

constexpr int64_t kSide = 224;   // the crop every image model here takes
constexpr int kBlurKernel = 11;  // bench/loader_vs_torchvision.py's heavy case: 11, sigma 2
constexpr double kBlurSigma = 2.0;

// Random pixels: the hardest case for agreement (every rounding is exercised); the kernels' time
// does not depend on the values.
at::Tensor random_images(int64_t n, int64_t h, int64_t w) {
  return at::randint(0, 256, {n, h, w, 3}, at::kByte);
}

void for_each_image(int64_t n, const std::function<void(int64_t)>& f) {
  at::parallel_for(0, n, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) f(i);
  });
}

// uint8 NHWC viewed as NCHW (channels_last strides, no copy), as torch's operators take it.
at::Tensor as_nchw(const at::Tensor& nhwc) { return nhwc.permute({0, 3, 1, 2}); }

// Levels between two uint8 results, and the share of values that differ.
void compare_levels(const at::Tensor& loom, const at::Tensor& torch, KernelComparison& c) {
  const at::Tensor d = (loom.to(at::kShort) - torch.to(at::kShort)).abs();
  c.difference = d.max().item<double>();
  c.difference_unit = "levels";
  c.differing_fraction = d.gt(0).sum().item<double>() / static_cast<double>(d.numel());
}

KernelComparison timed(std::string name, std::string group, std::string torch,
                       const std::function<void()>& loom_call,
                       const std::function<void()>& torch_call, const KernelBenchOptions& options) {
  const PairTimes times = time_side_by_side(loom_call, torch_call, options);
  KernelComparison c;
  c.name = std::move(name);
  c.group = std::move(group);
  c.torch = std::move(torch);
  c.loom_seconds = times.first;
  c.torch_seconds = times.second;
  c.repeats = options.repeats;
  return c;
}

// Loom's resize_bilinear against upsample_bilinear2d on the same uint8 memory (torch's AVX2
// uint8 kernel for 3 channels), and, for a shrink, the antialiased resize torchvision uses by
// default, which computes something else.
std::vector<KernelComparison> resize_cases(const KernelBenchOptions& options) {
  std::vector<KernelComparison> out;
  // A RandomResizedCrop-sized shrink (bilinear_resize.h's measured case) and an enlargement.
  const std::pair<int64_t, int64_t> sources[] = {{255, 290}, {120, 150}};
  for (const auto& [h, w] : sources) {
    const at::Tensor source = random_images(options.images, h, w);
    at::Tensor by_loom = at::empty({options.images, kSide, kSide, 3}, at::kByte);
    at::Tensor by_torch = at::empty_like(by_loom);
    const std::string shape = std::to_string(w) + "x" + std::to_string(h) + " -> 224x224";
    const auto loom_call = [&] {
      for_each_image(options.images,
                     [&](int64_t i) { data::resize_bilinear(source[i], by_loom[i]); });
    };
    const auto torch_call = [&] {
      for_each_image(options.images, [&](int64_t i) {
        at::Tensor into = as_nchw(by_torch.narrow(0, i, 1));
        at::upsample_bilinear2d_out(into, as_nchw(source.narrow(0, i, 1)), {kSide, kSide}, false);
      });
    };
    KernelComparison c = timed("resize " + shape, "resize", "at::upsample_bilinear2d (uint8)",
                               loom_call, torch_call, options);
    compare_levels(by_loom, by_torch, c);
    c.tolerance = 1;
    out.push_back(c);
    if (h < kSide) continue;
    const auto antialiased = [&] {
      for_each_image(options.images, [&](int64_t i) {
        by_torch[i].copy_(
            at::_upsample_bilinear2d_aa(as_nchw(source.narrow(0, i, 1)), {kSide, kSide}, false)
                .permute({0, 2, 3, 1})[0]);
      });
    };
    KernelComparison aa =
        timed("resize " + shape + " antialiased", "resize", "at::_upsample_bilinear2d_aa (uint8)",
              loom_call, antialiased, options);
    compare_levels(by_loom, by_torch, aa);
    aa.note = "torchvision's default (antialias=True) averages over the shrink; Loom's does not";
    out.push_back(aa);
  }
  return out;
}

// Depthwise weights for 3 channels: the 2-D kernel [3, 1, k, k] (torchvision's), or the 1-D
// kernel as a row [3, 1, 1, k] and a column [3, 1, k, 1].
struct BlurWeights {
  at::Tensor square, row, column;
};

BlurWeights blur_weights() {
  const std::vector<float> weights = data::gaussian_kernel(kBlurKernel, kBlurSigma);
  const at::Tensor w = at::tensor(weights);
  return {at::outer(w, w).expand({3, 1, kBlurKernel, kBlurKernel}).contiguous(),
          w.view({1, 1, 1, kBlurKernel}).expand({3, 1, 1, kBlurKernel}).contiguous(),
          w.view({1, 1, kBlurKernel, 1}).expand({3, 1, kBlurKernel, 1}).contiguous()};
}

at::Tensor depthwise(const at::Tensor& x, const at::Tensor& weight) {
  const std::vector<int64_t> one{1}, zero{0};
  return at::conv2d(x, weight, std::nullopt, one, zero, one, /*groups=*/3);
}

// torchvision's gaussian_blur on a uint8 CHW image: to float, reflect padding, a depthwise
// conv2d with the 2-D kernel (or, `separable`, with the 1-D kernel twice), rounded back.
at::Tensor torch_blur(const at::Tensor& chw, const BlurWeights& w, bool separable) {
  const int64_t pad = kBlurKernel / 2;
  at::Tensor x = at::reflection_pad2d(chw.unsqueeze(0).to(at::kFloat), {pad, pad, pad, pad});
  x = separable ? depthwise(depthwise(x, w.row), w.column) : depthwise(x, w.square);
  return x.round_().to(at::kByte)[0];
}

std::vector<KernelComparison> blur_cases(const KernelBenchOptions& options) {
  const at::Tensor images = random_images(options.images, kSide, kSide);
  // torchvision's images are CHW: torch's side gets that layout, made outside the timing.
  const at::Tensor chw = as_nchw(images).contiguous();
  const BlurWeights weights = blur_weights();
  at::Tensor work = images.clone();
  const auto loom_call = [&] {
    for_each_image(options.images, [&](int64_t i) {
      data::gaussian_blur(work[i], kBlurKernel, kBlurKernel, kBlurSigma);
    });
  };
  std::vector<KernelComparison> out;
  for (const bool separable : {false, true}) {
    const auto torch_call = [&] {
      for_each_image(options.images, [&](int64_t i) { torch_blur(chw[i], weights, separable); });
    };
    KernelComparison c =
        timed(std::string("blur 224x224 k=11 sigma=2") + (separable ? " separable" : ""), "blur",
              separable ? "at::conv2d, 1-D kernel twice (float)"
                        : "at::conv2d, 2-D kernel (torchvision's gaussian_blur)",
              loom_call, torch_call, options);
    // Agreement on fresh copies: Loom's blurs in place.
    at::Tensor by_loom = images.clone(), by_torch = at::empty_like(images);
    for_each_image(options.images, [&](int64_t i) {
      data::gaussian_blur(by_loom[i], kBlurKernel, kBlurKernel, kBlurSigma);
      by_torch[i].copy_(torch_blur(chw[i], weights, separable).permute({1, 2, 0}));
    });
    compare_levels(by_loom, by_torch, c);
    c.tolerance = 1;
    out.push_back(c);
  }
  return out;
}

// The feeder's one pass (uint8 NHWC -> normalised float, NCHW or channels_last) against torch's
// copy_ (conversion and layout), mul_ and add_: the feeder's own arithmetic, x * 1/(255 std) +
// (-mean/std), and what Feeder does on a CUDA device.
std::vector<KernelComparison> normalize_cases(const KernelBenchOptions& options) {
  const data::ChannelStats imagenet{{0.485, 0.456, 0.406}, {0.229, 0.224, 0.225}};
  const at::Tensor batch = random_images(options.images, kSide, kSide);
  at::Tensor scale = at::empty({1, 3, 1, 1}), shift = at::empty({1, 3, 1, 1});
  for (int64_t c = 0; c < 3; ++c) {
    scale[0][c] = 1.0 / (255.0 * imagenet.stddev[c]);
    shift[0][c] = -imagenet.mean[c] / imagenet.stddev[c];
  }
  std::vector<KernelComparison> out;
  for (const auto format : {at::MemoryFormat::Contiguous, at::MemoryFormat::ChannelsLast}) {
    const data::Feeder feeder(imagenet, format);
    const auto torch_normalize = [&] {
      at::Tensor x =
          at::empty(as_nchw(batch).sizes(), at::TensorOptions(at::kFloat).memory_format(format));
      return x.copy_(as_nchw(batch)).mul_(scale).add_(shift);
    };
    const bool last = format == at::MemoryFormat::ChannelsLast;
    KernelComparison c = timed(
        std::string("normalize to ") + (last ? "NHWC" : "NCHW") + " float", "normalize",
        "copy_, mul_, add_", [&] { feeder.to_input(batch); }, [&] { torch_normalize(); }, options);
    const at::Tensor by_loom = feeder.to_input(batch), by_torch = torch_normalize();
    c.difference =
        (by_loom - by_torch).abs().max().item<double>() / by_torch.abs().max().item<double>();
    c.difference_unit = "relative";
    c.tolerance = 1e-6;
    out.push_back(c);
  }
  return out;
}

}  // namespace

std::vector<KernelComparison> compare_image_kernels(const KernelBenchOptions& options) {
  std::vector<KernelComparison> out = resize_cases(options);
  for (auto& c : blur_cases(options)) out.push_back(std::move(c));
  for (auto& c : normalize_cases(options)) out.push_back(std::move(c));
  return out;
}

}  // namespace loom::cli
