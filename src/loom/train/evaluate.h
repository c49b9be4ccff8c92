// Test-split evaluation: the mean loss and top-1 accuracy.
#pragma once

#include <functional>

#include "loom/data/batch_source.h"
#include "loom/data/feeder.h"
#include "loom/models/loss.h"
#include "loom/models/model.h"

namespace loom::train {

struct EvalResult {
  double loss = 0.0;
  double accuracy = 0.0;  // 0..1
  int64_t samples = 0;
};

// Sums over the batches of an evaluation.
class EvalTally {
 public:
  // One batch's logits (any floating type) and labels.
  void add(const at::Tensor& logits, const at::Tensor& labels, const models::Loss& loss);
  EvalResult result() const;
  // loss sum, correct, samples: what ranks that evaluate parts of the test split combine.
  at::Tensor sums() const;
  static EvalResult from_sums(const at::Tensor& sums);

 private:
  double loss_sum_ = 0.0;
  int64_t correct_ = 0, seen_ = 0;
};

// Runs in eval mode without gradients and restores train mode afterwards. `after_batch`, when
// set, is called after each batch (the stall watchdog's sign of life).
EvalResult evaluate(models::Model& model, const models::Loss& loss,
                    const data::BatchSource& batches, const data::Feeder& feeder, bool bf16,
                    const std::function<void()>& after_batch = {});

}  // namespace loom::train
