// The split layers' sums say which pass they belong to, so that a group that reports a step's
// phases charges tensor_comm and returns to forward or backward (parallel/tensor_ranks.cpp);
// the loss and sequence parallelism's operators on two ranks as threads; a GPT split over them,
// with and without the sequence, computes one process's logits and gradients.
#include "loom/models/tensor_parallel.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "loom/core/autocast_scope.h"
#include "loom/core/error.h"
#include "loom/models/gpt.h"
#include "loom/models/llama.h"
#include "loom/models/lora.h"
#include "loom/models/module_model.h"
#include "loom/models/token_cross_entropy_loss.h"
#include "loom/models/vocab_parallel_loss.h"
#include "unit/models/small_llama.h"
#include "unit/models/thread_tensor_groups.h"

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

// Megatron's vocabulary-parallel cross-entropy on two ranks' halves of the logits is the
// cross-entropy of the whole logits, and each rank's gradient is its half of the whole one;
// ignored targets (fine-tuning prompts) count on neither rank. The gradient flowing in is scaled
// (as a loss scale or a mean over micro-batches does) and reaches the logits so.
TEST(TensorParallel, VocabularyParallelLossIsTheWholeLogitsLoss) {
  at::manual_seed(3);
  const at::Tensor logits = torch::randn({2, 300, 10}) * 3;  // 600 rows: several chunks
  const at::Tensor targets =
      torch::randint(0, 10, {2, 300}).masked_fill(torch::rand({2, 300}) < 0.3, kIgnoredTarget);
  const at::Tensor whole = logits.clone().requires_grad_(true);
  const at::Tensor want = TokenCrossEntropyLoss()(whole, targets);
  (want * 3).backward();
  ThreadGroups pair(2);
  at::Tensor got[2], grads[2];
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      ThreadGroups::Group group(pair, r);
      at::Tensor half = logits.narrow(2, 5 * r, 5).clone().requires_grad_(true);
      got[r] = VocabParallelCrossEntropyLoss(group)(half, targets);
      (got[r] * 3).backward();
      grads[r] = half.grad();
    });
  }
  for (auto& rank : ranks) rank.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_NEAR(got[r].item<double>(), want.item<double>(), 1e-5);
    EXPECT_TRUE(torch::allclose(grads[r], whole.grad().narrow(2, 5 * r, 5), 1e-5, 1e-7)) << r;
  }
}

// A target outside the vocabulary (as the group's shares make it up) stops the loss with an
// error, on the CPU before any sum crosses the group; an ignored target is not one.
at::Tensor targets_of(std::vector<int64_t> ids) { return torch::tensor(ids); }

TEST(TensorParallel, VocabularyParallelLossRefusesATargetOutsideTheVocabulary) {
  RecordingGroup group;
  const at::Tensor logits = torch::randn({4, 10});
  const VocabParallelCrossEntropyLoss loss(group);
  EXPECT_NO_THROW(loss(logits, targets_of({0, 9, kIgnoredTarget, 3})));
  const size_t sums = group.passes.size();
  EXPECT_THROW(loss(logits, targets_of({0, 10, 1, 2})), Error);
  EXPECT_THROW(loss(logits, targets_of({0, 1, -1, 2})), Error);
  EXPECT_EQ(group.passes.size(), sums);
}

// Sequence parallelism's operators on two ranks, forward and backward, against what the ranks'
// tensors put together give.
TEST(TensorParallel, SequenceGatherAndScatterMoveTheRanksPositions) {
  // Rank r's positions x[r] [2, 3, 4]; the split computation's weights w[r] over all 6.
  const at::Tensor x[2] = {torch::arange(24, torch::kFloat).reshape({2, 3, 4}),
                           -torch::arange(24, torch::kFloat).reshape({2, 3, 4}) * 0.5};
  const at::Tensor w[2] = {torch::linspace(-1, 1, 48).reshape({2, 6, 4}),
                           torch::linspace(2, 3, 48).reshape({2, 6, 4})};
  const at::Tensor both = torch::cat({x[0], x[1]}, 1);
  ThreadGroups pair(2);
  at::Tensor gathered[2], gathered_grad[2], scattered[2], scattered_grad[2], whole[2],
      whole_grad[2];
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      ThreadGroups::Group group(pair, r);
      // Into a split computation: every position, each rank's partial gradient summed.
      at::Tensor mine = x[r].clone().requires_grad_(true);
      gathered[r] = gather_sequence(mine, group);
      (gathered[r] * w[r]).sum().backward();
      gathered_grad[r] = mine.grad();
      // Out of it: partial sums w[r] summed, this rank's positions kept; the gradient of this
      // rank's positions (x[r]) put together.
      at::Tensor partial = w[r].clone().requires_grad_(true);
      scattered[r] = scatter_sequence(partial, group);
      (scattered[r] * x[r]).sum().backward();
      scattered_grad[r] = partial.grad();
      // Into a computation every rank repeats: the gradient of this rank's positions only.
      at::Tensor again = x[r].clone().requires_grad_(true);
      whole[r] = whole_sequence(again, group);
      (whole[r] * w[0]).sum().backward();
      whole_grad[r] = again.grad();
    });
  }
  for (auto& rank : ranks) rank.join();
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE(r);
    EXPECT_TRUE(torch::equal(gathered[r], both));
    EXPECT_TRUE(torch::allclose(gathered_grad[r], (w[0] + w[1]).narrow(1, 3 * r, 3)));
    EXPECT_TRUE(torch::allclose(scattered[r], (w[0] + w[1]).narrow(1, 3 * r, 3)));
    EXPECT_TRUE(torch::equal(scattered_grad[r], both));
    EXPECT_TRUE(torch::equal(whole[r], both));
    EXPECT_TRUE(torch::equal(whole_grad[r], w[0].narrow(1, 3 * r, 3)));
  }
}

// The product of the gathered positions that keeps only this rank's for backward gives what
// gather_sequence then linear give, forward and backward, in fp32 and under bf16 autocast; with
// and without a bias.
TEST(TensorParallel, GatheredLinearIsTheProductOfTheGatheredPositions) {
  at::manual_seed(2);
  const at::Tensor x[2] = {torch::randn({2, 3, 4}), torch::randn({2, 3, 4})};
  const at::Tensor w[2] = {torch::randn({5, 4}), torch::randn({5, 4})};  // each rank's columns
  const at::Tensor b[2] = {torch::randn({5}), torch::randn({5})};
  const at::Tensor r = torch::randn({2, 6, 5});
  for (const bool bf16 : {false, true}) {
    for (const bool bias : {true, false}) {
      SCOPED_TRACE(std::string(bf16 ? "bf16" : "fp32") + (bias ? ", bias" : ""));
      ThreadGroups pair(2);
      // [rank][0: gather_sequence then linear, 1: gathered_linear]: output, gradients of x, w, b
      at::Tensor out[2][2], gx[2][2], gw[2][2], gb[2][2];
      std::vector<std::thread> ranks;
      for (int k = 0; k < 2; ++k) {
        ranks.emplace_back([&, k] {
          ThreadGroups::Group group(pair, k);
          for (int way = 0; way < 2; ++way) {
            at::Tensor xs = x[k].clone().requires_grad_(true);
            at::Tensor ws = w[k].clone().requires_grad_(true);
            at::Tensor bs = bias ? b[k].clone().requires_grad_(true) : at::Tensor();
            {
              AutocastScope autocast(bf16 ? at::kBFloat16 : at::kFloat);
              out[k][way] = way == 0 ? at::linear(gather_sequence(xs, group), ws, bs)
                                     : gathered_linear(xs, ws, bs, group);
            }
            (out[k][way].to(at::kFloat) * r).sum().backward();
            gx[k][way] = xs.grad();
            gw[k][way] = ws.grad();
            if (bias) gb[k][way] = bs.grad();
          }
        });
      }
      for (auto& rank : ranks) rank.join();
      for (int k = 0; k < 2; ++k) {
        EXPECT_EQ(out[k][1].scalar_type(), bf16 ? at::kBFloat16 : at::kFloat);
        EXPECT_TRUE(torch::equal(out[k][1], out[k][0]));
        const double tolerance = bf16 ? 2e-2 : 1e-5;
        EXPECT_TRUE(torch::allclose(gx[k][1], gx[k][0], tolerance, tolerance));
        EXPECT_TRUE(torch::allclose(gw[k][1], gw[k][0], tolerance, tolerance));
        if (bias) EXPECT_TRUE(torch::allclose(gb[k][1], gb[k][0], tolerance, tolerance));
      }
    }
  }
}

// A rank of `ranks` that never communicates: for what each rank computes alone.
class LoneRank : public TensorGroup {
 public:
  LoneRank(int rank, int ranks) : rank_(rank), ranks_(ranks) {}
  int rank() const override { return rank_; }
  int size() const override { return ranks_; }
  void sum(at::Tensor&) override { ADD_FAILURE() << "no sum expected"; }

 private:
  int rank_, ranks_;
};

// Each rank's dropout of its positions is one process's dropout of the whole, there, and leaves
// the generator where one process's leaves it.
TEST(TensorParallel, SequenceDropoutIsOneProcesssDropoutOfTheRanksPositions) {
  const at::Tensor x = torch::randn({2, 6, 5});
  at::manual_seed(11);
  const at::Tensor want = at::dropout(x, 0.3, true);
  const at::Tensor next = torch::rand({1});
  for (int r = 0; r < 3; ++r) {
    SCOPED_TRACE(r);
    LoneRank rank(r, 3);
    at::manual_seed(11);
    const at::Tensor got = sequence_dropout(x.narrow(1, 2 * r, 2), 0.3, true, rank);
    EXPECT_TRUE(torch::equal(got, want.narrow(1, 2 * r, 2)));
    EXPECT_TRUE(torch::equal(torch::rand({1}), next));
  }
  LoneRank rank(0, 2);
  EXPECT_TRUE(torch::equal(sequence_dropout(x, 0.3, /*train=*/false, rank), x));
  LoneRank of_four(0, 4);
  EXPECT_THROW(own_positions(x, of_four), Error);
}

// A language model (a GPT, a Llama) split over two ranks as threads (by heads, hidden width
// and, where it divides, the vocabulary; with `sequence`, the sequence too) computes one
// process's logits, and each rank's gradients are its slices of one process's (every whole
// parameter's whole). The loss is sum(logits x r), r fixed: each rank's share of it where the
// logits are split. `network` makes the model, 8 positions of `vocab` tokens.
void expect_split_like_one(const std::function<std::shared_ptr<ZooNetwork>()>& network,
                           int64_t vocab, bool sequence, bool vocabulary_splits) {
  at::manual_seed(5);
  const at::Tensor ids = torch::randint(0, vocab, {3, 8}, torch::kLong);
  const at::Tensor r = torch::randn({3, 8, vocab});
  auto make = [&] {
    at::manual_seed(7);
    return ModuleModel("decoder", network(), false);
  };
  ModuleModel one = make();
  const at::Tensor want = one.forward(ids);
  (want * r).sum().backward();

  ThreadGroups pair(2);
  ThreadGroups::Group groups[2] = {{pair, 0, sequence}, {pair, 1, sequence}};
  ModuleModel split[2] = {make(), make()};
  at::Tensor logits[2], evaluated[2], decoded[2];
  AppliedTensorPlan applied[2];
  std::vector<std::thread> ranks;
  for (int k = 0; k < 2; ++k) {
    applied[k] = apply_tensor_plan(split[k], groups[k]);
    ranks.emplace_back([&, k] {
      logits[k] = split[k].forward(ids);
      const bool by_vocab = applied[k].output_split;
      const int64_t share = logits[k].size(2);
      (logits[k] * (by_vocab ? r.narrow(2, k * share, share) : r)).sum().backward();
      torch::NoGradGuard evaluation;
      evaluated[k] = split[k].forward(ids);
      // Cached decoding, of 5 positions then 1, splits no sequence.
      KvCache cache;
      forward_cached(split[k].module(), ids.narrow(1, 0, 5), cache);
      decoded[k] = forward_cached(split[k].module(), ids.narrow(1, 5, 1), cache);
    });
  }
  for (auto& rank : ranks) rank.join();
  const NamedTensors whole = one.named_parameters();
  for (int k = 0; k < 2; ++k) {
    SCOPED_TRACE("rank " + std::to_string(k));
    EXPECT_EQ(applied[k].output_split, vocabulary_splits);
    const int64_t share = logits[k].size(2);
    const at::Tensor mine = want.narrow(2, applied[k].output_split ? k * share : 0, share);
    EXPECT_TRUE(torch::allclose(logits[k], mine, 1e-4, 1e-5));
    EXPECT_TRUE(torch::allclose(evaluated[k], mine, 1e-4, 1e-5));
    EXPECT_TRUE(torch::allclose(decoded[k], mine.narrow(1, 5, 1), 1e-4, 1e-5));
    const TensorSplits& splits = applied[k].splits;
    const NamedTensors params = split[k].named_parameters();
    ASSERT_EQ(params.size(), whole.size());
    for (size_t i = 0; i < params.size(); ++i) {
      const auto& [name, p] = params[i];
      if (!p.requires_grad()) {  // frozen (under LoRA): no gradient at all
        EXPECT_FALSE(p.grad().defined()) << name;
        continue;
      }
      const at::Tensor full = whole[i].second.grad();
      const auto it = splits.find(name);
      const at::Tensor expected = it == splits.end() ? full : slice_of(full, it->second, k, 2);
      ASSERT_TRUE(p.grad().defined()) << name;
      EXPECT_TRUE(torch::allclose(p.grad(), expected, 1e-4, 1e-6)) << name;
    }
  }
}

std::function<std::shared_ptr<ZooNetwork>()> gpt(int64_t vocab) {
  GptConfig c;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = 16;
  c.seq_len = 8;
  c.vocab = vocab;
  return [c] { return make_gpt(c); };
}

// 4 query heads over 2 key/value heads: each rank keeps 2 query heads and the one they share.
std::function<std::shared_ptr<ZooNetwork>()> llama(int64_t vocab, bool tied) {
  const LlamaConfig c = small_llama(tied, vocab);
  return [c] { return make_llama(c); };
}

TEST(TensorParallel, GptSplitByTheSequenceComputesOneProcesssGradients) {
  expect_split_like_one(gpt(40), 40, true, true);   // the vocabulary split too
  expect_split_like_one(gpt(33), 33, true, false);  // the embedding whole
}

TEST(TensorParallel, GptSplitWithoutTheSequenceComputesOneProcesssGradients) {
  expect_split_like_one(gpt(40), 40, false, true);
  expect_split_like_one(gpt(33), 33, false, false);
}

TEST(TensorParallel, LlamaSplitComputesOneProcesssGradients) {
  for (const bool sequence : {false, true}) {
    SCOPED_TRACE(sequence ? "by the sequence too" : "by heads and width");
    expect_split_like_one(llama(40, true), 40, sequence, true);   // tied, the vocabulary split
    expect_split_like_one(llama(33, true), 33, sequence, false);  // tied, the embedding whole
    expect_split_like_one(llama(40, false), 40, sequence, true);  // its own head, split
  }
}

// LoRA adapters on q, v (column-parallel: B cut, A whole) and o, down (row-parallel: A cut, B
// whole), their B drawn at random so that every gradient is not zero: the split model computes
// one process's logits and adapter gradients, and the frozen base gets none; with the sequence
// split too (A's products gathered into the column-parallel ones, scattered out of the
// row-parallel ones).
TEST(TensorParallel, LlamaWithLoraAdaptersSplitComputesOneProcesssGradients) {
  for (const bool tied : {true, false}) {
    SCOPED_TRACE(tied ? "tied" : "untied");
    const auto base = llama(40, tied);
    const auto adapted = [base] {
      std::shared_ptr<ZooNetwork> net = base();
      LoraModelConfig lora;
      lora.rank = 4;
      lora.alpha = 8;
      lora.dropout = 0;  // (its masks, keyed per sample, are checked through loom train)
      lora.targets = {"*.q_proj", "*.v_proj", "*.o_proj", "*.down_proj"};
      EXPECT_EQ(apply_lora(*net, lora, "llama").size(), 8u);
      torch::NoGradGuard no_grad;
      for (auto& p : net->named_parameters()) {
        if (p.key().find("lora_B") != std::string::npos) p.value().normal_(0, 0.1);
      }
      return net;
    };
    for (const bool sequence : {false, true}) {
      SCOPED_TRACE(sequence ? "by the sequence too" : "by heads and width");
      expect_split_like_one(adapted, 40, sequence, /*vocabulary_splits=*/true);
    }
  }
}

// A group larger than the key/value heads is refused under parallel.tensor, naming both.
TEST(TensorParallel, LlamaKeyValueHeadsMustDivideTheGroup) {
  LlamaConfig c;
  c.n_head = 4;
  c.n_kv_head = 1;
  c.n_embd = 16;
  c.hidden = 24;
  ThreadGroups pair(2);
  ThreadGroups::Group group(pair, 0);
  ModuleModel model("llama", make_llama(c), false);
  try {
    apply_tensor_plan(model, group);
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.key(), "parallel.tensor");
    EXPECT_EQ(e.field("value"), "2");
    EXPECT_EQ(e.field("allowed"), "1");
    EXPECT_EQ(e.field("count_key"), "model.llama.n_kv_head") << e.what();
  }
}

TEST(TensorParallel, GptSequenceSplitNeedsTheContextToDivide) {
  GptConfig c;
  c.n_head = 2;
  c.n_embd = 8;
  c.seq_len = 9;
  ThreadGroups pair(2);
  ThreadGroups::Group group(pair, 0, /*sequence=*/true);
  ModuleModel gpt("gpt", make_gpt(c), false);
  try {
    apply_tensor_plan(gpt, group);
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.key(), "parallel.tensor_sequence");
    EXPECT_EQ(e.field("allowed"), "1");  // what divides both the 2 heads and the 9 positions
  }
}

}  // namespace
}  // namespace loom::models
