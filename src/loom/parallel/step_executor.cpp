#include "loom/parallel/step_executor.h"

#include <ATen/ATen.h>

#include "loom/core/ignored_target.h"

namespace loom::parallel {

void add_targets(const at::Tensor& targets, StepOutcome& outcome) {
  outcome.targets += targets.numel();
  outcome.counted_targets += targets.ne(kIgnoredTarget).sum().item<int64_t>();
}

}  // namespace loom::parallel
