#include "loom/models/token_cross_entropy_loss.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/autograd.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "loom/core/error.h"
#include "loom/core/ignored_target.h"
#include "loom/models/row_kernels.h"

namespace loom::models {
namespace {

// Cross-entropy of rows of logits [N, V] (float or bf16) against targets [N], as one autograd
// node: the forward keeps each row's log-sum-exp, the backward writes softmax − one-hot straight
// into a gradient of the logits' own type. LibTorch's path widens bf16 logits to float, writes
// the log-softmax, and in backward writes a float gradient and narrows it again: four more
// passes over the largest activation of a language model.
class FusedTokenCrossEntropy : public torch::autograd::Function<FusedTokenCrossEntropy> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& logits,
                            const at::Tensor& targets, bool mean) {
    const int64_t rows = logits.size(0), vocab = logits.size(1);
    at::Tensor lse = at::empty({rows}, at::kFloat);
    at::Tensor per_row = at::empty({rows}, at::kDouble);
    const int64_t* target = targets.data_ptr<int64_t>();
    rows::dispatch(logits.scalar_type(), [&](auto element) {
      using scalar_t = decltype(element);
      const scalar_t* x = logits.data_ptr<scalar_t>();
      float* l = lse.data_ptr<float>();
      double* loss = per_row.data_ptr<double>();
      at::parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
        std::vector<float> widened, exps(static_cast<size_t>(vocab));
        for (int64_t r = begin; r < end; ++r) {
          const int64_t t = target[r];
          if (t == kIgnoredTarget) {
            l[r] = 0;
            loss[r] = 0;
            continue;
          }
          if (t < 0 || t >= vocab) {
            throw Error("token cross-entropy: target " + std::to_string(t) + " of row " +
                        std::to_string(r) + " is outside the vocabulary of " +
                        std::to_string(vocab));
          }
          const float* row = rows::as_floats(x + r * vocab, vocab, widened);
          const float top = rows::max(row, vocab);
          l[r] = top + std::log(rows::exp_into(row, exps.data(), vocab, 1.0f, top, 1.0f));
          loss[r] = static_cast<double>(l[r]) - static_cast<double>(row[t]);
        }
      });
    });
    const double scale = mean ? 1.0 / static_cast<double>(std::max<int64_t>(rows, 1)) : 1.0;
    ctx->save_for_backward({logits, targets, lse});
    ctx->saved_data["scale"] = scale;
    return (per_row.sum() * scale).to(at::kFloat);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& logits = saved[0];
    const int64_t* target = saved[1].data_ptr<int64_t>();
    const float* lse = saved[2].data_ptr<float>();
    const int64_t rows = logits.size(0), vocab = logits.size(1);
    const float scale =
        static_cast<float>(ctx->saved_data["scale"].toDouble() * grad_outputs[0].item<double>());
    at::Tensor grad = at::empty_like(logits);
    rows::dispatch(logits.scalar_type(), [&](auto element) {
      using scalar_t = decltype(element);
      const scalar_t* x = logits.data_ptr<scalar_t>();
      scalar_t* g = grad.data_ptr<scalar_t>();
      at::parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
        std::vector<float> widened, gradient;
        for (int64_t r = begin; r < end; ++r) {
          const int64_t t = target[r];
          if (t == kIgnoredTarget) {
            std::fill_n(g + r * vocab, vocab, scalar_t(0));
            continue;
          }
          const float* row = rows::as_floats(x + r * vocab, vocab, widened);
          float* out = rows::float_target(g + r * vocab, vocab, gradient);
          rows::exp_into(row, out, vocab, 1.0f, lse[r], scale);  // scale × softmax
          // The target's softmax less one, before any rounding to the logits' type.
          out[t] = (rows::exp(row[t] - lse[r]) - 1.0f) * scale;
          rows::store(out, g + r * vocab, vocab);
        }
      });
    });
    return {grad, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor TokenCrossEntropyLoss::with_torch_kernels(const at::Tensor& logits,
                                                     const at::Tensor& targets,
                                                     Reduction reduction) {
  const int64_t vocab = logits.size(-1);
  const at::Tensor rows = logits.reshape({-1, vocab}).to(at::kFloat);
  const at::Tensor sum = at::cross_entropy_loss(rows, targets.reshape({-1}).to(at::kLong), {},
                                                at::Reduction::Sum, kIgnoredTarget);
  return reduction == Reduction::kMean ? sum / static_cast<double>(rows.size(0)) : sum;
}

at::Tensor TokenCrossEntropyLoss::operator()(const at::Tensor& logits, const at::Tensor& targets,
                                             Reduction reduction) const {
  if (!logits.is_cpu()) return with_torch_kernels(logits, targets, reduction);
  const int64_t vocab = logits.size(-1);
  at::Tensor rows = logits.reshape({-1, vocab});
  if (rows.scalar_type() != at::kBFloat16) rows = rows.to(at::kFloat);
  return FusedTokenCrossEntropy::apply(rows.contiguous(),
                                       targets.reshape({-1}).to(at::kLong).contiguous(),
                                       reduction == Reduction::kMean);
}

}  // namespace loom::models
