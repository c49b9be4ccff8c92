#include "loom/train/evaluate.h"

#include <cmath>

#include "loom/core/ignored_target.h"

namespace loom::train {

void EvalTally::add(const at::Tensor& logits, const at::Tensor& targets, const models::Loss& loss) {
  const at::Tensor scores = logits.to(at::kFloat);
  const at::Tensor batch = at::stack({
      loss(scores, targets, models::Reduction::kSum).to(at::kDouble),
      scores.argmax(-1).eq(targets).sum().to(at::kDouble),
      // Targets that count in no loss (kIgnoredTarget: fine-tuning prompts) are not seen either.
      targets.ne(kIgnoredTarget).sum().to(at::kDouble),
  });
  sums_ = sums_.defined() ? sums_ + batch : batch;
}

double EvalResult::perplexity() const { return std::exp(loss); }

at::Tensor EvalTally::sums() const {
  return sums_.defined() ? sums_.to(at::kCPU) : at::zeros({3}, at::kDouble);
}

EvalResult EvalTally::result() const { return from_sums(sums()); }

EvalResult EvalTally::from_sums(const at::Tensor& sums) {
  const at::Tensor on_host = sums.to(at::kCPU).contiguous();
  const double* s = on_host.data_ptr<double>();
  EvalResult r;
  r.samples = static_cast<int64_t>(std::llround(s[2]));
  if (s[2] > 0) {
    r.loss = s[0] / s[2];
    r.accuracy = s[1] / s[2];
  }
  return r;
}

}  // namespace loom::train
