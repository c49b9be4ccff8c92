#include "loom/train/evaluate.h"

#include <torch/utils.h>

#include "loom/train/runtime_choice.h"

namespace loom::train {

EvalResult evaluate(models::Model& model, const models::Loss& loss, const data::BatchSource& batches,
                    const data::Feeder& feeder, bool bf16) {
  torch::NoGradGuard no_grad;
  model.train(false);
  double loss_sum = 0.0;
  int64_t correct = 0, seen = 0;
  for (int64_t b = 0; b < batches.steps_per_epoch(); ++b) {
    data::Batch batch = batches.batch(0, b);
    at::Tensor logits;
    {
      AutocastScope autocast(bf16);
      logits = model.forward(feeder.to_input(batch.images));
    }
    logits = logits.to(at::kFloat);
    loss_sum += loss(logits, batch.labels, models::Reduction::kSum).item<double>();
    correct += logits.argmax(1).eq(batch.labels).sum().item<int64_t>();
    seen += batch.labels.size(0);
  }
  model.train(true);
  EvalResult r;
  r.samples = seen;
  if (seen > 0) {
    r.loss = loss_sum / static_cast<double>(seen);
    r.accuracy = static_cast<double>(correct) / static_cast<double>(seen);
  }
  return r;
}

}  // namespace loom::train
