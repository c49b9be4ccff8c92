#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "loom/models/loss.h"

namespace loom::models {
namespace {

// Cross-entropy written out: -log softmax at the label, with smoothing spreading eps over all
// classes as torch.nn.CrossEntropyLoss does.
double reference(const at::Tensor& logits, const at::Tensor& labels, double eps) {
  at::Tensor logp = logits.to(at::kDouble).log_softmax(1);
  const int64_t classes = logits.size(1);
  double total = 0;
  for (int64_t i = 0; i < logits.size(0); ++i) {
    const int64_t y = labels[i].item<int64_t>();
    total += -(1 - eps) * logp[i][y].item<double>() - eps / classes * logp[i].sum().item<double>();
  }
  return total;
}

TEST(CrossEntropyLoss, MatchesTheDefinitionWithAndWithoutSmoothing) {
  at::manual_seed(3);
  at::Tensor logits = at::randn({6, 5});
  at::Tensor labels = at::tensor({0, 4, 2, 2, 1, 3}, at::kLong);
  for (double eps : {0.0, 0.1}) {
    CrossEntropyLoss loss(eps);
    EXPECT_NEAR(loss(logits, labels).item<double>(), reference(logits, labels, eps) / 6, 1e-5);
    EXPECT_NEAR(loss(logits, labels, Reduction::kSum).item<double>(),
                reference(logits, labels, eps), 1e-4);
  }
}

TEST(CrossEntropyLoss, WidensBf16LogitsToFloat) {
  at::Tensor logits = at::randn({4, 3}).to(at::kBFloat16);
  at::Tensor value = CrossEntropyLoss()(logits, at::tensor({0, 1, 2, 0}, at::kLong));
  EXPECT_EQ(value.scalar_type(), at::kFloat);
  EXPECT_EQ(value.dim(), 0);
}

}  // namespace
}  // namespace loom::models
