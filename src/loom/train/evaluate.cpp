#include "loom/train/evaluate.h"

#include <cmath>

#include "loom/core/ignored_target.h"

namespace loom::train {

void EvalTally::add(const at::Tensor& logits, const at::Tensor& targets, const models::Loss& loss) {
  const at::Tensor scores = logits.to(at::kFloat);
  loss_sum_ += loss(scores, targets, models::Reduction::kSum).item<double>();
  correct_ += scores.argmax(-1).eq(targets).sum().item<int64_t>();
  // Targets that count in no loss (kIgnoredTarget: fine-tuning prompts) are not seen either.
  seen_ += targets.ne(kIgnoredTarget).sum().item<int64_t>();
}

double EvalResult::perplexity() const { return std::exp(loss); }

at::Tensor EvalTally::sums() const {
  return at::tensor({loss_sum_, static_cast<double>(correct_), static_cast<double>(seen_)},
                    at::kDouble);
}

EvalResult EvalTally::result() const { return from_sums(sums()); }

EvalResult EvalTally::from_sums(const at::Tensor& sums) {
  const double* s = sums.data_ptr<double>();
  EvalResult r;
  r.samples = static_cast<int64_t>(std::llround(s[2]));
  if (s[2] > 0) {
    r.loss = s[0] / s[2];
    r.accuracy = s[1] / s[2];
  }
  return r;
}

}  // namespace loom::train
