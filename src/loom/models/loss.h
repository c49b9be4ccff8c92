// The training objective as an object, so that training, evaluation and a pipeline's last stage
// compute the loss the same way, and a new objective is one new class.
#pragma once

#include <ATen/Tensor.h>

#include <memory>

#include "loom/core/ignored_target.h"
#include "loom/models/model.h"

namespace loom::models {

// Language-model losses skip targets of kIgnoredTarget (core/ignored_target.h). Their mean still
// divides by every position, counted or not, so that each micro-batch weighs the same whatever
// the layout; the trainer then rescales the step's gradients to a mean over the counted targets
// of the whole step (train/trainer.cpp).
enum class Reduction { kMean, kSum };

class Loss {
 public:
  virtual ~Loss() = default;
  // The loss of `logits` against integer targets (labels [B] for logits [B, classes], or the
  // next tokens [B, T] for logits [B, T, vocab]), as a float32 scalar tensor that backward can
  // start from (bf16 logits are widened first).
  virtual at::Tensor operator()(const at::Tensor& logits, const at::Tensor& labels,
                                Reduction reduction = Reduction::kMean) const = 0;
};

// Cross-entropy with optional label smoothing (0 = none), as torch.nn.CrossEntropyLoss.
class CrossEntropyLoss : public Loss {
 public:
  explicit CrossEntropyLoss(double label_smoothing = 0.0) : label_smoothing_(label_smoothing) {}
  at::Tensor operator()(const at::Tensor& logits, const at::Tensor& labels,
                        Reduction reduction = Reduction::kMean) const override;
  double label_smoothing() const { return label_smoothing_; }

 private:
  double label_smoothing_;
};

// The loss a task trains with: cross-entropy over classes (with label smoothing) for image
// classification, over every token position for a language model (no smoothing).
std::unique_ptr<Loss> make_task_loss(Task task, double label_smoothing = 0.0);

}  // namespace loom::models
