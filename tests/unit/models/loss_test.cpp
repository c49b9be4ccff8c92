#include "loom/models/loss.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "loom/models/token_cross_entropy_loss.h"

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

// A language model's targets of kIgnoredTarget (fine-tuning prompts) add nothing to the loss,
// whose mean still divides by every position, and their logits get no gradient: the sum is
// torch's cross-entropy that ignores them, in float and bf16.
TEST(TokenCrossEntropyLoss, IgnoredTargetsAddNothingAndGetNoGradient) {
  at::manual_seed(5);
  const at::Tensor targets =
      at::tensor(std::vector<int64_t>{3, kIgnoredTarget, 0, 6, kIgnoredTarget, kIgnoredTarget})
          .view({2, 3});
  const at::Tensor ignored = targets.eq(kIgnoredTarget).view({-1});
  for (at::ScalarType type : {at::kFloat, at::kBFloat16}) {
    SCOPED_TRACE(std::string(c10::toString(type)));
    const at::Tensor logits = at::randn({2, 3, 7}).to(type).requires_grad_(true);
    const at::Tensor loss = make_task_loss(Task::kLanguageModel)->operator()(logits, targets);
    const at::Tensor expected =
        at::cross_entropy_loss(logits.detach().to(at::kFloat).view({6, 7}), targets.view({-1}), {},
                               at::Reduction::Sum, kIgnoredTarget) /
        6.0;
    EXPECT_NEAR(loss.item<double>(), expected.item<double>(), 1e-5);
    loss.backward();
    const at::Tensor grad = logits.grad().view({6, 7}).to(at::kFloat);
    EXPECT_TRUE(at::equal(grad.index({ignored}), at::zeros({3, 7})));
    // The counted rows: softmax less one-hot, over the six positions.
    const at::Tensor counted = ignored.logical_not();
    const at::Tensor softmax = logits.detach().to(at::kFloat).view({6, 7}).softmax(1);
    const at::Tensor one_hot = at::one_hot(targets.view({-1}).clamp_min(0), 7).to(at::kFloat);
    EXPECT_TRUE(at::allclose(grad.index({counted}), ((softmax - one_hot) / 6).index({counted}),
                             type == at::kFloat ? 1e-5 : 1e-2, type == at::kFloat ? 1e-6 : 1e-2));
  }
}

// Logits on a GPU take torch's cross-entropy instead of the fused kernel (which reads them on the
// host): on CPU logits, both give the same loss and the same gradient, ignored targets included.
TEST(TokenCrossEntropyLoss, TorchsKernelsForOtherDevicesMatchTheFusedKernel) {
  at::manual_seed(9);
  const at::Tensor targets =
      at::tensor(std::vector<int64_t>{3, kIgnoredTarget, 0, 6, 2, kIgnoredTarget}).view({2, 3});
  for (at::ScalarType type : {at::kFloat, at::kBFloat16}) {
    for (Reduction reduction : {Reduction::kMean, Reduction::kSum}) {
      SCOPED_TRACE(std::string(c10::toString(type)) + (reduction == Reduction::kSum ? " sum" : ""));
      const at::Tensor start = at::randn({2, 3, 7}).to(type);
      const at::Tensor fused_in = start.clone().requires_grad_(true);
      const at::Tensor torch_in = start.clone().requires_grad_(true);
      const at::Tensor fused = TokenCrossEntropyLoss()(fused_in, targets, reduction);
      const at::Tensor reference =
          TokenCrossEntropyLoss::with_torch_kernels(torch_in, targets, reduction);
      EXPECT_NEAR(fused.item<double>(), reference.item<double>(), 1e-5);
      fused.backward();
      reference.backward();
      EXPECT_EQ(torch_in.grad().scalar_type(), type);
      EXPECT_TRUE(at::allclose(fused_in.grad().to(at::kFloat), torch_in.grad().to(at::kFloat),
                               type == at::kFloat ? 1e-5 : 1e-2, type == at::kFloat ? 1e-6 : 1e-2));
    }
  }
}

}  // namespace
}  // namespace loom::models
