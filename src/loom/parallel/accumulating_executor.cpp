#include "loom/parallel/accumulating_executor.h"

#include <optional>

#include "loom/core/autocast_scope.h"
#include "loom/core/error.h"
#include "loom/models/draw_key.h"

namespace loom::parallel {

AccumulatingExecutor::AccumulatingExecutor(models::Model& model, const models::Loss& loss,
                                           GradSync& sync, StepObserver& observer,
                                           AccumulatingOptions options)
    : model_(model), loss_(loss), sync_(sync), observer_(observer), options_(options) {
  if (options_.micro_batches < 1) {
    throw Error("AccumulatingExecutor: " + std::to_string(options_.micro_batches) +
                " micro-batches per step, expected at least 1");
  }
}

StepOutcome AccumulatingExecutor::run(const MicroBatchSource& micro_batch) {
  observer_.enter(Phase::kOptimizer);
  sync_.zero_grad();
  StepOutcome outcome;
  const int64_t count = options_.micro_batches;
  for (int64_t k = 0; k < count; ++k) {
    // Micro-batches before the last only accumulate; the last one's backward exchanges the sum.
    // Every rank makes the same calls, even for an empty micro-batch.
    std::optional<GradSync::NoSync> accumulate_only;
    if (k + 1 < count) accumulate_only.emplace(sync_);
    observer_.enter(Phase::kCommExposed);  // e.g. sharing rank 0's buffers waits on the others
    sync_.prepare();
    const MicroBatch batch = micro_batch(k);
    if (batch.targets.size(0) > 0) {
      const models::DrawKeyScope keyed(observer_.draw_keys(k));
      outcome.add_loss(forward_backward(batch));
      outcome.samples += batch.targets.size(0);
      if (options_.count_targets) add_targets(batch, outcome);
      if (model_.forward_is_collective()) last_ = batch;
    } else if (model_.forward_is_collective() && last_.input.defined()) {
      // The others' passes make collectives this rank must make too, in the same order: the
      // last micro-batch again, learning nothing from it.
      forward_backward(last_, 0.0);
    }
    observer_.enter(Phase::kCommExposed);
    sync_.finish();
    observer_.enter(Phase::kOther);
  }
  return outcome;
}

at::Tensor AccumulatingExecutor::forward_backward(const MicroBatch& batch, double weight) {
  const bool counted = weight != 0.0;
  observer_.enter(Phase::kForward);
  at::Tensor logits;
  {
    AutocastScope autocast(options_.autocast);
    if (counted) observer_.forward_begins();
    logits = model_.forward(batch.input);
    if (counted) observer_.forward_ends(batch.input.size(0));
  }
  at::Tensor loss = loss_(logits, batch.targets);
  observer_.enter(Phase::kBackward);
  const int64_t count = options_.micro_batches;
  at::Tensor scaled = count > 1 ? loss / static_cast<double>(count) : loss;
  // The weight (1, or 0 for a stand-in) times fp16's loss scale (a power of two; 1 without):
  // exact.
  const double factor = weight * loss_scale_;
  if (factor != 1.0) scaled = scaled * factor;
  scaled.backward();
  observer_.enter(Phase::kOther);
  return loss;
}

}  // namespace loom::parallel
