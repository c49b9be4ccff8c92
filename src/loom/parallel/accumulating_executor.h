// The step executor of one model replica: micro-batches run one after another, their gradients
// accumulate (scaled by 1/micro-batches, so the step's gradient is the mean over them), and the
// gradient sync exchanges the sum with the last one's backward. One micro-batch is the plain step.
//
// Threading: one thread (the trainer's).
#pragma once

#include "loom/models/loss.h"
#include "loom/models/model.h"
#include "loom/parallel/grad_sync.h"
#include "loom/parallel/step_executor.h"

namespace loom::parallel {

struct AccumulatingOptions {
  int64_t micro_batches = 1;
  at::ScalarType autocast = at::kFloat;  // forward under autocast to it (kFloat: none)
  bool count_targets = false;            // StartOptions::count_targets
};

class AccumulatingExecutor : public StepExecutor {
 public:
  // All references must outlive the executor.
  AccumulatingExecutor(models::Model& model, const models::Loss& loss, GradSync& sync,
                       StepObserver& observer, AccumulatingOptions options);

  int64_t micro_batches() const override { return options_.micro_batches; }
  StepOutcome run(const MicroBatchSource& micro_batch) override;

 private:
  // Forward, loss and backward of one micro-batch; returns its loss, unread. `weight` scales
  // what backward starts from; 0: the same calls and no gradient (a stand-in for a micro-batch
  // this rank could not read, not counted).
  at::Tensor forward_backward(const MicroBatch& batch, double weight = 1.0);

  models::Model& model_;
  const models::Loss& loss_;
  GradSync& sync_;
  StepObserver& observer_;
  AccumulatingOptions options_;
  MicroBatch last_;  // the last micro-batch with samples, for a model with collective passes
};

}  // namespace loom::parallel
