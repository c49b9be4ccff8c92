// A language model's loss: cross-entropy of every position's logits [B, T, vocab] against the
// next tokens [B, T], the mean (or sum) over all B x T tokens. A target of kIgnoredTarget
// (loss.h) adds nothing and its logits get no gradient; the mean still divides by B x T.
//
// CPU logits take Loom's fused kernel (row_kernels.h), which reads them on the host; logits on
// another device take torch's cross-entropy there (in float), with the same result.
#pragma once

#include "loom/models/loss.h"

namespace loom::models {

class TokenCrossEntropyLoss : public Loss {
 public:
  at::Tensor operator()(const at::Tensor& logits, const at::Tensor& targets,
                        Reduction reduction = Reduction::kMean) const override;

  // torch's kernels on the logits' own device: what non-CPU logits take, and the reference the
  // fused kernel is tested against.
  static at::Tensor with_torch_kernels(const at::Tensor& logits, const at::Tensor& targets,
                                       Reduction reduction = Reduction::kMean);
};

}  // namespace loom::models
