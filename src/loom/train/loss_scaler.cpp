#include "loom/train/loss_scaler.h"

#include <string>

#include "loom/core/error.h"

namespace loom::train {

bool LossScaler::update(bool finite, int64_t step) {
  if (finite) {
    if (++state_.growth_tracker >= options_.growth_interval) {
      state_.scale *= options_.growth_factor;
      state_.growth_tracker = 0;
    }
    return true;
  }
  if (state_.scale <= 1.0) {
    // Halving on from here would only hide a model or data that makes inf or NaN.
    throw Error("training: the gradients of step " + std::to_string(step) +
                    " are not finite at a loss scale of " + std::to_string(state_.scale) +
                    ", after " + std::to_string(state_.skipped_steps) +
                    " skipped steps: something other than fp16's range overflows; stopped",
                {{"problem", "non_finite_gradients"},
                 {"step", std::to_string(step)},
                 {"loss_scale", std::to_string(state_.scale)}});
  }
  state_.scale *= options_.backoff_factor;
  state_.growth_tracker = 0;
  ++state_.skipped_steps;
  return false;
}

}  // namespace loom::train
