#include "loom/models/vocab_parallel_loss.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <limits>
#include <string>

#include "loom/core/error.h"

namespace loom::models {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Rows widened to float a chunk at a time: the whole share of a step's logits in float would be
// twice its bf16 size again, at the step's peak (the end of forward).
constexpr int64_t kRowsAtOnce = 256;

// On the CPU, where reading them costs no wait, targets outside the vocabulary stop the step
// with an error naming one of them (every rank of the group sees the same targets, so all stop).
void refuse_targets_outside(const at::Tensor& targets, const at::Tensor& outside, int64_t vocab,
                            const TensorGroup& group) {
  if (!outside.any().item<bool>()) return;
  const int64_t row = at::nonzero(outside)[0][0].item<int64_t>();
  throw Error("vocabulary-parallel cross-entropy: target " +
              std::to_string(targets[row].item<int64_t>()) + " of row " + std::to_string(row) +
              " is outside the vocabulary of " + std::to_string(vocab) + " (tensor rank " +
              std::to_string(group.rank()) + " of " + std::to_string(group.size()) + ")");
}

template <typename Each>
void by_chunks(int64_t rows, const Each& each) {
  for (int64_t first = 0; first < rows; first += kRowsAtOnce) {
    each(first, std::min(kRowsAtOnce, rows - first));
  }
}

struct VocabParallelCrossEntropy : public torch::autograd::Function<VocabParallelCrossEntropy> {
  // `logits` [N, vocabulary share], `targets` [N] over the whole vocabulary.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& logits,
                            const at::Tensor& targets, TensorGroup* group_ptr, bool mean) {
    // (Forward alone uses the group: backward is each rank's own share's.)
    TensorGroup& group = *group_ptr;
    const int64_t rows = logits.size(0), share = logits.size(1);
    // Ignored targets (kIgnoredTarget) count nowhere: no rank's share holds them.
    const at::Tensor counted = targets.ne(kIgnoredTarget);
    const at::Tensor outside =
        counted.logical_and(targets.lt(0).logical_or(targets.ge(share * group.size())));
    if (targets.is_cpu()) refuse_targets_outside(targets, outside, share * group.size(), group);
    // The rows' maxima over the whole vocabulary: each rank's put in its place and summed.
    const auto floats = logits.options().dtype(at::kFloat);  // on the logits' device
    at::Tensor maxima = at::zeros({group.size(), rows}, floats);
    by_chunks(rows, [&](int64_t first, int64_t n) {
      maxima.select(0, group.rank())
          .narrow(0, first, n)
          .copy_(std::get<0>(logits.narrow(0, first, n).to(at::kFloat).max(1)));
    });
    group.sum_in(maxima, SumPass::kForward);
    const at::Tensor top = std::get<0>(maxima.max(0));
    // Each row's sum of exponentials, and its target's logit from the rank whose share holds it.
    const at::Tensor local = targets - group.rank() * share;
    const at::Tensor mine = local.ge(0).logical_and(local.lt(share));
    const at::Tensor index = local.clamp(0, share - 1);
    at::Tensor sums = at::empty({rows}, floats);
    at::Tensor picked = at::empty({rows}, floats);
    by_chunks(rows, [&](int64_t first, int64_t n) {
      const at::Tensor x = logits.narrow(0, first, n).to(at::kFloat);
      sums.narrow(0, first, n).copy_(at::exp(x - top.narrow(0, first, n).unsqueeze(1)).sum(1));
      picked.narrow(0, first, n)
          .copy_(x.gather(1, index.narrow(0, first, n).unsqueeze(1)).squeeze(1) *
                 mine.narrow(0, first, n).to(at::kFloat));
    });
    group.sum_in(sums, SumPass::kForward);
    group.sum_in(picked, SumPass::kForward);
    const at::Tensor lse = top + at::log(sums);
    const double scale = mean ? 1.0 / static_cast<double>(std::max<int64_t>(rows, 1)) : 1.0;
    // The logits themselves (alive anyway) and each row's log-sum-exp: backward makes the
    // softmax again rather than keep it.
    ctx->save_for_backward({logits, lse, index, mine, counted});
    ctx->saved_data["scale"] = scale;
    // On a device the targets are not read on the host (that would wait for the GPU each
    // micro-batch): a target outside the vocabulary makes the loss NaN instead, which stops the
    // run at the next log line naming the step. (The token shards' ids were checked against the
    // model's vocabulary when they were opened.)
    const at::Tensor per_row = (lse - picked)
                                   .masked_fill(counted.logical_not(), 0)
                                   .masked_fill(outside, std::numeric_limits<float>::quiet_NaN());
    return (per_row.to(at::kDouble).sum() * scale).to(at::kFloat);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &logits = saved[0], &lse = saved[1], &index = saved[2], &mine = saved[3],
                     &counted = saved[4];
    // The incoming gradient stays a tensor: reading it on the host would wait for a GPU. The
    // product in double, rounded to float once.
    const at::Tensor scale =
        (grad_outputs[0].to(at::kDouble) * ctx->saved_data["scale"].toDouble()).to(at::kFloat);
    at::Tensor grad = at::empty_like(logits);
    // Softmax minus one-hot on this rank's share, a chunk of rows at a time.
    by_chunks(logits.size(0), [&](int64_t first, int64_t n) {
      at::Tensor g =
          at::exp(logits.narrow(0, first, n).to(at::kFloat) - lse.narrow(0, first, n).unsqueeze(1));
      g.scatter_add_(1, index.narrow(0, first, n).unsqueeze(1),
                     -mine.narrow(0, first, n).to(at::kFloat).unsqueeze(1));
      g.mul_(counted.narrow(0, first, n).to(at::kFloat).unsqueeze(1) * scale);
      grad.narrow(0, first, n).copy_(g);
    });
    return {grad, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor VocabParallelCrossEntropyLoss::operator()(const at::Tensor& logits,
                                                     const at::Tensor& targets,
                                                     Reduction reduction) const {
  const int64_t share = logits.size(-1);
  return VocabParallelCrossEntropy::apply(logits.reshape({-1, share}), targets.reshape({-1}),
                                          &group_, reduction == Reduction::kMean);
}

}  // namespace loom::models
