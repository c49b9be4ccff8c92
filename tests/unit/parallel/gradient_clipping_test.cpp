// A whole model's gradients clipped as torch's clip_grad_norm_ clips them, bit for bit: Loom's
// version only leaves out the host read of the norm that torch's returns.
#include <gtest/gtest.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/torch.h>

#include <vector>

#include "loom/parallel/parallel_layout.h"

namespace loom::parallel {
namespace {

// Parameters with gradients of norm about `scale` * 30, and a copy of them.
std::pair<std::vector<at::Tensor>, std::vector<at::Tensor>> parameters_and_copy(int count,
                                                                                double scale) {
  std::vector<at::Tensor> mine, torchs;
  for (int i = 0; i < count; ++i) {
    at::Tensor p = torch::randn({7 + i, 5}).requires_grad_(true);
    p.mutable_grad() = torch::randn({7 + i, 5}) * scale;
    at::Tensor q = p.detach().clone().requires_grad_(true);
    q.mutable_grad() = p.grad().clone();
    mine.push_back(p.grad());
    torchs.push_back(q);
  }
  return {mine, torchs};
}

TEST(GradientClipping, AWholeModelsGradientsAreClippedAsTorchClipsThem) {
  at::manual_seed(5);
  for (const int count : {1, 4}) {
    for (const double scale : {10.0, 0.001}) {  // clipped, and left as they are
      SCOPED_TRACE(std::to_string(count) + " tensors, scale " + std::to_string(scale));
      auto [mine, torchs] = parameters_and_copy(count, scale);
      const std::vector<at::Tensor> before = {mine.front().clone()};
      clip_whole_gradients(mine, 1.0);
      torch::nn::utils::clip_grad_norm_(torchs, 1.0);
      for (size_t i = 0; i < mine.size(); ++i) EXPECT_TRUE(torch::equal(mine[i], torchs[i].grad()));
      EXPECT_EQ(torch::equal(mine.front(), before.front()), scale < 1);
    }
  }
}

}  // namespace
}  // namespace loom::parallel
