#include "loom/models/loss.h"

#include <torch/nn/functional/loss.h>

#include "loom/models/token_cross_entropy_loss.h"

namespace loom::models {

at::Tensor CrossEntropyLoss::operator()(const at::Tensor& logits, const at::Tensor& labels,
                                        Reduction reduction) const {
  auto options =
      torch::nn::functional::CrossEntropyFuncOptions().label_smoothing(label_smoothing_);
  if (reduction == Reduction::kSum) options.reduction(torch::kSum);
  return torch::nn::functional::cross_entropy(logits.to(at::kFloat), labels, options);
}

std::unique_ptr<Loss> make_task_loss(Task task, double label_smoothing) {
  if (task == Task::kLanguageModel) return std::make_unique<TokenCrossEntropyLoss>();
  return std::make_unique<CrossEntropyLoss>(label_smoothing);
}

}  // namespace loom::models
