// Test-split evaluation: the mean loss and top-1 accuracy, tallied over the batches a layout
// evaluates (parallel::ParallelLayout::forward_only) and combined over its ranks. The unit is a
// prediction: one per image for a classifier, one per token for a language model (its loss is
// then per token, exp(loss) its perplexity, and its accuracy that of the next token).
#pragma once

#include "loom/models/loss.h"

namespace loom::train {

struct EvalResult {
  double loss = 0.0;
  double accuracy = 0.0;  // 0..1
  int64_t samples = 0;    // predictions: images, or tokens
  double perplexity() const;
};

// Sums over the batches of an evaluation, kept on the logits' device and read once at the end:
// a GPU's evaluation waits for no batch on the host.
class EvalTally {
 public:
  // One batch's logits (any floating type; classes along the last dimension) and targets.
  void add(const at::Tensor& logits, const at::Tensor& targets, const models::Loss& loss);
  EvalResult result() const;
  // loss sum, correct, samples (double, on the CPU): what ranks that evaluate parts of the test
  // split combine.
  at::Tensor sums() const;
  static EvalResult from_sums(const at::Tensor& sums);

 private:
  at::Tensor sums_;  // as sums(), on the logits' device; undefined before the first batch
};

}  // namespace loom::train
