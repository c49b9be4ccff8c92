#include "loom/models/token_cross_entropy_loss.h"

#include <torch/nn/functional/loss.h>

namespace loom::models {

at::Tensor TokenCrossEntropyLoss::operator()(const at::Tensor& logits, const at::Tensor& targets,
                                             Reduction reduction) const {
  auto options = torch::nn::functional::CrossEntropyFuncOptions();
  if (reduction == Reduction::kSum) options.reduction(torch::kSum);
  const int64_t vocab = logits.size(-1);
  return torch::nn::functional::cross_entropy(logits.to(at::kFloat).reshape({-1, vocab}),
                                              targets.reshape({-1}), options);
}

}  // namespace loom::models
