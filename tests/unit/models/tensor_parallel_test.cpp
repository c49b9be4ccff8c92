// The split layers' sums say which pass they belong to, so that a group that reports a step's
// phases charges tensor_comm and returns to forward or backward (parallel/tensor_ranks.cpp).
#include "loom/models/tensor_parallel.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "loom/core/error.h"
#include "loom/models/token_cross_entropy_loss.h"
#include "loom/models/vocab_parallel_loss.h"

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

// A checkpoint's whole tensor cut into slices and put together again is itself; a fused
// query/key/value weight's slices hold every section's part.
TEST(TensorParallel, SlicesOfAWholeTensorPutTogetherAreIt) {
  const at::Tensor qkv = torch::arange(12 * 2, torch::kFloat).reshape({12, 2});
  const TensorSplit sections{0, 3};
  std::vector<at::Tensor> slices;
  for (int r = 0; r < 2; ++r) slices.push_back(slice_of(qkv, sections, r, 2));
  // Rank 1: rows 2-3 (q), 6-7 (k) and 10-11 (v).
  EXPECT_TRUE(
      torch::equal(slices[1].select(1, 0), torch::tensor({4.f, 6.f, 12.f, 14.f, 20.f, 22.f})));
  EXPECT_TRUE(torch::equal(whole_of(slices, sections), qkv));
  const at::Tensor proj = torch::randn({3, 8});
  const TensorSplit inputs{1, 1};
  EXPECT_TRUE(torch::equal(whole_of({slice_of(proj, inputs, 0, 4), slice_of(proj, inputs, 1, 4),
                                     slice_of(proj, inputs, 2, 4), slice_of(proj, inputs, 3, 4)},
                                    inputs),
                           proj));
  EXPECT_THROW(slice_of(proj, inputs, 0, 3), Error);
}

// Two ranks as threads of this process, summing through shared memory.
class ThreadPair {
 public:
  class Group : public TensorGroup {
   public:
    Group(ThreadPair& pair, int rank) : pair_(pair), rank_(rank) {}
    int rank() const override { return rank_; }
    int size() const override { return 2; }
    void sum(at::Tensor& tensor) override { pair_.sum(rank_, tensor); }

   private:
    ThreadPair& pair_;
    int rank_;
  };

  void sum(int rank, at::Tensor& tensor) {
    std::unique_lock<std::mutex> lock(mutex_);
    const int round = round_;
    parts_[rank] = tensor.clone();
    if (++arrived_ == 2) {
      total_ = parts_[0] + parts_[1];
      arrived_ = 0;
      ++round_;
      changed_.notify_all();
    } else {
      changed_.wait(lock, [&] { return round_ != round; });
    }
    tensor.copy_(total_);
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  at::Tensor parts_[2], total_;
  int arrived_ = 0, round_ = 0;
};

// Megatron's vocabulary-parallel cross-entropy on two ranks' halves of the logits is the
// cross-entropy of the whole logits, and each rank's gradient is its half of the whole one.
TEST(TensorParallel, VocabularyParallelLossIsTheWholeLogitsLoss) {
  at::manual_seed(3);
  const at::Tensor logits = torch::randn({2, 300, 10}) * 3;  // 600 rows: several chunks
  const at::Tensor targets = torch::randint(0, 10, {2, 300});
  const at::Tensor whole = logits.clone().requires_grad_(true);
  const at::Tensor want = TokenCrossEntropyLoss()(whole, targets);
  want.backward();
  ThreadPair pair;
  at::Tensor got[2], grads[2];
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      ThreadPair::Group group(pair, r);
      at::Tensor half = logits.narrow(2, 5 * r, 5).clone().requires_grad_(true);
      got[r] = VocabParallelCrossEntropyLoss(group)(half, targets);
      got[r].backward();
      grads[r] = half.grad();
    });
  }
  for (auto& rank : ranks) rank.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_NEAR(got[r].item<double>(), want.item<double>(), 1e-5);
    EXPECT_TRUE(torch::allclose(grads[r], whole.grad().narrow(2, 5 * r, 5), 1e-5, 1e-7)) << r;
  }
}

}  // namespace
}  // namespace loom::models
