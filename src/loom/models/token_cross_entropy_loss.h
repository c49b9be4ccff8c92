// A language model's loss: cross-entropy of every position's logits [B, T, vocab] against the
// next tokens [B, T], the mean (or sum) over all B x T tokens. A target of kIgnoredTarget
// (loss.h) adds nothing and its logits get no gradient; the mean still divides by B x T.
#pragma once

#include "loom/models/loss.h"

namespace loom::models {

class TokenCrossEntropyLoss : public Loss {
 public:
  at::Tensor operator()(const at::Tensor& logits, const at::Tensor& targets,
                        Reduction reduction = Reduction::kMean) const override;
};

}  // namespace loom::models
