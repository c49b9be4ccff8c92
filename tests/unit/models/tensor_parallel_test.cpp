// The split layers' sums say which pass they belong to, so that a group that reports a step's
// phases charges tensor_comm and returns to forward or backward (parallel/tensor_ranks.cpp).
#include "loom/models/tensor_parallel.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <vector>

namespace loom::models {
namespace {

// A group of one rank (its sum leaves the tensor as it is) that records each sum's pass.
class RecordingGroup : public TensorGroup {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void sum(at::Tensor&) override {}
  void sum_in(at::Tensor& tensor, SumPass pass) override {
    passes.push_back(pass);
    sum(tensor);
  }
  std::vector<SumPass> passes;
};

TEST(TensorParallel, SumsSayWhetherTheyRunInForwardBackwardOrNoStep) {
  RecordingGroup group;
  const at::Tensor x = torch::ones({2, 3}, torch::requires_grad());
  const at::Tensor w = torch::full({3, 3}, 0.5, torch::requires_grad());
  // A split sublayer: enter_split's sum is its gradient's, leave_split's its output's.
  const at::Tensor y = leave_split(at::matmul(enter_split(x, group), w), group);
  EXPECT_EQ(group.passes, std::vector<SumPass>{SumPass::kForward});
  y.sum().backward();
  EXPECT_EQ(group.passes, (std::vector<SumPass>{SumPass::kForward, SumPass::kBackward}));
  EXPECT_TRUE(torch::allclose(x.grad(), torch::full({2, 3}, 1.5)));

  // Evaluation, without gradients, is no step's.
  group.passes.clear();
  {
    torch::NoGradGuard no_grad;
    leave_split(at::matmul(enter_split(x, group), w), group);
  }
  EXPECT_EQ(group.passes, std::vector<SumPass>{SumPass::kNoStep});
}

// A recomputed block runs its forward again inside backward, with gradients: its sums there are
// backward's.
TEST(TensorParallel, AForwardRunInsideBackwardSumsInBackward) {
  RecordingGroup group;
  const at::Tensor x = torch::ones({2, 3}, torch::requires_grad());
  const at::Tensor h = x * 2;
  h.register_hook([&](const at::Tensor& grad) {
    at::AutoGradMode on(true);
    const at::Tensor again = torch::ones({2, 3}, torch::requires_grad());
    leave_split(again * 3, group);
    return grad;
  });
  h.sum().backward();
  EXPECT_EQ(group.passes, std::vector<SumPass>{SumPass::kBackward});
}

}  // namespace
}  // namespace loom::models
