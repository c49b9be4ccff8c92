#include "loom/parallel/step_executor.h"

#include <ATen/ATen.h>

#include "loom/core/ignored_target.h"

namespace loom::parallel {

void StepOutcome::add_loss(const at::Tensor& loss) {
  const at::Tensor value = loss.detach().to(at::kDouble);
  loss_sum = loss_sum.defined() ? loss_sum + value : value;
}

double StepOutcome::loss_sum_value() const {
  return loss_sum.defined() ? loss_sum.item<double>() : 0.0;
}

int64_t counted_targets(const at::Tensor& targets) {
  return targets.ne(kIgnoredTarget).sum().item<int64_t>();
}

void add_targets(const MicroBatch& batch, StepOutcome& outcome) {
  outcome.targets += batch.targets.numel();
  outcome.counted_targets +=
      batch.counted_targets >= 0 ? batch.counted_targets : counted_targets(batch.targets);
}

}  // namespace loom::parallel
