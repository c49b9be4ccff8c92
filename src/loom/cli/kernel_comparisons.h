// Loom's own kernels against torch's equivalents, each pair timed side by side in one process on
// the same inputs, and checked to compute the same thing: what `loom bench kernels` runs
// (issue 50: keep the faster of each). The cases are the shapes Loom trains with: the GPT bench's
// attention (6 heads of 64, context 256 x batch 8 and 1024 x 2, fp32 and bf16), its AdamW step
// (gpt_mini's parameter tensors), and the input pipeline's per-image kernels on a batch of
// 224 x 224 RGB images. Nothing here prints; the command owns the terminal.
//
// Threading: run from one thread; the kernels use LibTorch's intra-op threads (at::parallel_for),
// per-image kernels one image per task, as the loader's threads call them.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace loom::cli {

struct KernelBenchOptions {
  int warmup = 3;    // untimed calls of each side first
  int repeats = 21;  // timed calls of each side, alternating which goes first
  int64_t images = 64;
};

// One case: the median seconds of each side and how far apart their results are.
struct KernelComparison {
  std::string name;   // "attention fp32 T=256 B=8"
  std::string group;  // attention, adamw, resize, blur, normalize
  std::string torch;  // what torch's side calls
  double loom_seconds = 0, torch_seconds = 0;
  int repeats = 0;
  // max |loom - torch| / max |torch| ("relative") or in uint8 levels ("levels").
  double difference = 0;
  std::string difference_unit;
  double tolerance = -1;           // the difference allowed; < 0: not checked (see `note`)
  double differing_fraction = -1;  // uint8 results: the share of values that differ
  std::string note;                // where the two compute different things
};

// Medians of `repeats` timed calls of each function after `warmup` untimed ones, interleaved
// (the side that goes first alternates) so that the host's bursts of noise fall on both.
struct PairTimes {
  double first = 0, second = 0;
};
PairTimes time_side_by_side(const std::function<void()>& first, const std::function<void()>& second,
                            const KernelBenchOptions& options);

// Forward and backward of causal attention as the GPT's layer runs it: Loom's blocked
// causal_attention against at::scaled_dot_product_attention(is_causal).
std::vector<KernelComparison> compare_attention(const KernelBenchOptions& options);

// One AdamW step on gpt_mini's parameters: Loom's FusedAdamW against at::_fused_adamw_ called
// directly. Since session 31 FusedAdamW runs that kernel (it beat Loom's own loop), so this
// measures what LibTorch's optimizer state around it costs.
std::vector<KernelComparison> compare_adamw(const KernelBenchOptions& options);

// Bilinear resize, Gaussian blur and the feeder's normalisation against torch's operators
// (image_kernel_comparisons.cpp).
std::vector<KernelComparison> compare_image_kernels(const KernelBenchOptions& options);

}  // namespace loom::cli
