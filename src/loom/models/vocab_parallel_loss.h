// A language model's cross-entropy over logits split by vocabulary across a tensor group
// (Megatron's vocabulary-parallel cross-entropy): rank r holds the logits of its share of the
// vocabulary [B, T, vocab / ranks], and the loss is computed without putting the whole logits
// together. Three small sums cross the group a step: every rank's row maxima, the rows' sums of
// exponentials, and each row's target logit (from the rank whose share holds it). Backward is
// softmax minus one-hot on each rank's share, with no communication. Nothing is read on the host
// but CPU targets' range: on a GPU a micro-batch never waits for the device here.
#pragma once

#include "loom/models/loss.h"
#include "loom/models/tensor_parallel.h"

namespace loom::models {

class VocabParallelCrossEntropyLoss : public Loss {
 public:
  // `group` must outlive the loss; every rank of it calls the loss in the same order.
  explicit VocabParallelCrossEntropyLoss(TensorGroup& group) : group_(group) {}
  at::Tensor operator()(const at::Tensor& logits, const at::Tensor& targets,
                        Reduction reduction = Reduction::kMean) const override;

 private:
  TensorGroup& group_;
};

}  // namespace loom::models
