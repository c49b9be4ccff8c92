// Random draws in a forward pass (dropout) that do not depend on the parallel layout. Every
// layout that trains like one process on the same global batch should draw one process's masks
// with dropout on too; a generator that runs on from whatever drew before cannot give that:
// data-parallel replicas, pipeline stages and accumulated micro-batches each draw a different
// part of the step, in a different order. So a training step tells the model which samples a
// micro-batch holds (DrawKeyScope, set by the step executors from StepObserver::draw_keys), and a
// dropout mask's part for each sample is drawn from (that sample's key, the block that draws,
// the how-many-th draw of that block): the same mask for the same sample wherever and whenever
// its block runs. Tensor-parallel ranks, which hold the same samples, draw alike; a recomputed
// block replays its forward's draw state (models/recompute.h).
//
// The state is thread-local, as LibTorch's grad mode and autocast are: a scope on the thread
// that runs the forward. Without a scope, masks are drawn from the default generator as usual.
//
// Limits: row r is taken to be sample first + r, which holds while no sample of a batch is
// skipped (token windows never are; an image loader's data.bad_samples: skip compacts its
// batches, whose later rows would then take their neighbours' keys). Models that draw through
// torch::nn::Dropout (the zoo's CNN and MLP) are not keyed.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "loom/core/rng.h"

namespace loom::models {

// The samples of a micro-batch, by their place in the epoch's order: this rank's share of the
// epoch is every `replicas`-th sample from `replica` (the loader's sharding), and row r is its
// (first + r)-th.
struct SampleKeys {
  uint64_t key = 0;  // (seed, epoch)'s
  int64_t first = 0;
  int64_t replicas = 1, replica = 0;
  uint64_t of_row(int64_t r) const {
    return hash_key({key, static_cast<uint64_t>((first + r) * replicas + replica)});
  }
};

// What the thread's draws are keyed by: the micro-batch's samples (none: unkeyed), the block
// running, and the draws it has made so far.
struct DrawState {
  std::optional<SampleKeys> samples;
  int64_t block = 0;
  int64_t draws = 0;
};

class DrawKeyScope {
 public:
  explicit DrawKeyScope(std::optional<SampleKeys> samples) : previous_(state_) {
    state_ = DrawState{samples, 0, 0};
  }
  // A recomputed block's forward again, from the state its first forward started in.
  explicit DrawKeyScope(const DrawState& state) : previous_(state_) { state_ = state; }
  ~DrawKeyScope() { state_ = previous_; }
  DrawKeyScope(const DrawKeyScope&) = delete;
  DrawKeyScope& operator=(const DrawKeyScope&) = delete;

  static DrawState& state() { return state_; }

 private:
  DrawState previous_;
  static inline thread_local DrawState state_;
};

// Block `index` starts: its draws are counted from 0.
inline void start_block_draws(int64_t index) {
  DrawState& s = DrawKeyScope::state();
  s.block = index;
  s.draws = 0;
}

// A dropout mask for a tensor of `sizes` whose dimension 0 holds the micro-batch's samples: 0, or
// 1 / (1 - p) with probability 1 - p (torch's dropout scaling), in `options`' type. Keyed, each
// sample's part is a SplitMix64 stream from its key (a pure function of the key and the element,
// filled by every thread on the CPU, by tensor operations on another device); unkeyed, torch's
// dropout of ones, from the default generator.
at::Tensor dropout_mask(at::IntArrayRef sizes, double p, const at::TensorOptions& options);

// The keyed mask of rows that draw from `streams`, `per_row` elements each, by tensor operations
// on `device`: 1 / (1 - p) = `kept` where the top 24 bits of an element's draw fall below
// `kept_below`, else 0, as float [rows, per_row]. What dropout_mask runs off the CPU, so that a
// GPU draws its masks without a copy from the host; the same values as the CPU's loop.
at::Tensor keyed_mask_with_tensor_ops(const std::vector<uint64_t>& streams, int64_t per_row,
                                      uint64_t kept_below, float kept, at::Device device);

// Dropout of `x` [samples, ...] with dropout_mask's mask; `x` itself when not training or p is 0.
inline at::Tensor keyed_dropout(const at::Tensor& x, double p, bool train) {
  if (!train || p == 0) return x;
  return x * dropout_mask(x.sizes(), p, x.options().requires_grad(false));
}

}  // namespace loom::models
