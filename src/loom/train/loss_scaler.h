// fp16's dynamic loss scaling, as torch.amp.GradScaler does it. fp16 holds nothing smaller than
// 6e-8, and a backward pass computed in it flushes small gradients to zero; the loss is
// multiplied by a scale before backward, so the gradients come out scaled by it, and the
// optimizer steps from them divided by it again. A step whose gradients overflowed (inf or NaN
// on any rank that steps together) is skipped and the scale halved; after `growth_interval`
// steps in a row without one it doubles. The scale stays a power of two, so scaling and
// unscaling are exact.
//
// bf16 has fp32's range and needs none of this (runtime.precision bf16 on GPUs from Ampere on);
// fp16 is what the tensor cores of V100s and T4s multiply.
#pragma once

#include <cstdint>

namespace loom::train {

// What a checkpoint keeps of the scaler, so that a resumed run scales as the uninterrupted one.
struct LossScaleState {
  double scale = 65536.0;      // 2^16, torch's first scale
  int64_t growth_tracker = 0;  // steps in a row without overflow since the scale last changed
  int64_t skipped_steps = 0;   // over the whole run, resumed runs included

  bool operator==(const LossScaleState& other) const {
    return scale == other.scale && growth_tracker == other.growth_tracker &&
           skipped_steps == other.skipped_steps;
  }
};

struct LossScalerOptions {
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};

class LossScaler {
 public:
  explicit LossScaler(LossScalerOptions options = {}, LossScaleState start = {})
      : options_(options), state_(start) {}

  // What backward multiplies the loss by in the next step.
  double scale() const { return state_.scale; }

  // After step `step`'s gradients were checked: `finite` on every rank that steps together.
  // Returns whether the optimizer steps from them. Throws Error (problem non_finite_gradients)
  // when gradients overflow at a scale of 1 or less: they are not finite even unscaled, which no
  // scale can fix.
  bool update(bool finite, int64_t step);

  const LossScaleState& state() const { return state_; }
  void restore(const LossScaleState& state) { state_ = state; }

 private:
  LossScalerOptions options_;
  LossScaleState state_;
};

}  // namespace loom::train
