#include "loom/models/vocab_parallel_loss.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

namespace loom::models {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct VocabParallelCrossEntropy : public torch::autograd::Function<VocabParallelCrossEntropy> {
  // `logits` [N, vocab share], `targets` [N] over the whole vocabulary.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& logits,
                            const at::Tensor& targets, int64_t group_address, bool mean) {
    TensorGroup& group = *reinterpret_cast<TensorGroup*>(group_address);
    const at::Tensor x = logits.to(at::kFloat);
    const int64_t rows = x.size(0), share = x.size(1);
    // The rows' maxima over the whole vocabulary, each rank's put in its place and summed.
    at::Tensor maxima = at::zeros({group.size(), rows}, at::kFloat);
    maxima.select(0, group.rank()).copy_(std::get<0>(x.max(1)));
    group.sum_in(maxima, SumPass::kForward);
    const at::Tensor top = std::get<0>(maxima.max(0));
    at::Tensor sums = at::exp(x - top.unsqueeze(1)).sum(1);
    group.sum_in(sums, SumPass::kForward);
    const at::Tensor local = targets - group.rank() * share;
    const at::Tensor mine = (local >= 0).logical_and(local < share);
    const at::Tensor index = local.clamp(0, share - 1);
    at::Tensor picked = x.gather(1, index.unsqueeze(1)).squeeze(1) * mine.to(at::kFloat);
    group.sum_in(picked, SumPass::kForward);
    const at::Tensor lse = top + at::log(sums);
    const at::Tensor per_row = (lse - picked).to(at::kDouble);
    const double scale = mean ? 1.0 / static_cast<double>(std::max<int64_t>(rows, 1)) : 1.0;
    // The logits themselves (alive anyway) and each row's log-sum-exp: backward makes the
    // softmax again rather than keep it in float, as large as the logits twice over in bf16.
    ctx->save_for_backward({logits, lse, index, mine});
    ctx->saved_data["scale"] = scale;
    return (per_row.sum() * scale).to(at::kFloat);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& logits = saved[0];
    at::Tensor grad = at::exp(logits.to(at::kFloat) - saved[1].unsqueeze(1));  // the softmax
    grad.scatter_add_(1, saved[2].unsqueeze(1), -saved[3].to(at::kFloat).unsqueeze(1));
    grad.mul_(grad_outputs[0].to(at::kFloat) * ctx->saved_data["scale"].toDouble());
    return {grad.to(logits.scalar_type()), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor VocabParallelCrossEntropyLoss::operator()(const at::Tensor& logits,
                                                     const at::Tensor& targets,
                                                     Reduction reduction) const {
  const int64_t share = logits.size(-1);
  return VocabParallelCrossEntropy::apply(logits.reshape({-1, share}), targets.reshape({-1}),
                                          reinterpret_cast<int64_t>(&group_),
                                          reduction == Reduction::kMean);
}

}  // namespace loom::models
