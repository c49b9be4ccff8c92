#include "loom/models/token_cross_entropy_loss.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/autograd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "loom/core/error.h"

namespace loom::models {
namespace {

// e^x in float within 2 ulp, in straight-line code the compiler vectorizes (a call to expf does
// not vectorize here, and would be most of the loss's time): x = n ln 2 + r with |r| <= ln 2 / 2
// (ln 2 split in two for exactness), e^r by Cephes' degree-6 polynomial, 2^n built in the
// exponent bits. n is rounded by adding 1.5 x 2^23, which leaves it in the low mantissa bits.
inline float vector_exp(float x) {
  x = x < -87.3f ? -87.3f : (x > 88.7f ? 88.7f : x);
  constexpr float kRound = 12582912.0f;  // 1.5 x 2^23
  const float shifted = x * 1.44269504088896341f + kRound;
  const float n = shifted - kRound;
  std::int32_t n_bits;
  std::memcpy(&n_bits, &shifted, sizeof n_bits);
  const float r = x - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  // The low bits of `shifted` hold n + 2^22 (two's complement within them): n + 127 from there.
  const std::int32_t exponent = ((n_bits - 0x4B400000) + 127) << 23;
  float two_to_n;
  std::memcpy(&two_to_n, &exponent, sizeof two_to_n);
  return p * two_to_n;
}

constexpr int64_t kLanes = 16;  // partial maxima and sums, so that the reductions vectorize

// One row of float logits: log Σ exp(x). Two passes over a row that stays in cache (max, then
// the sum).
__attribute__((target_clones("avx512f", "avx2", "default"))) float row_log_sum_exp(
    const float* __restrict x, int64_t n) {
  float top[kLanes], sum[kLanes];
  for (int64_t k = 0; k < kLanes; ++k) top[k] = -std::numeric_limits<float>::infinity();
  const int64_t whole = n / kLanes * kLanes;
  for (int64_t j = 0; j < whole; j += kLanes) {
    for (int64_t k = 0; k < kLanes; ++k) top[k] = x[j + k] > top[k] ? x[j + k] : top[k];
  }
  float row_top = -std::numeric_limits<float>::infinity();
  for (int64_t k = 0; k < kLanes; ++k) row_top = std::max(row_top, top[k]);
  for (int64_t j = whole; j < n; ++j) row_top = std::max(row_top, x[j]);
  for (int64_t k = 0; k < kLanes; ++k) sum[k] = 0;
  for (int64_t j = 0; j < whole; j += kLanes) {
    for (int64_t k = 0; k < kLanes; ++k) sum[k] += vector_exp(x[j + k] - row_top);
  }
  float total = 0;
  for (int64_t k = 0; k < kLanes; ++k) total += sum[k];
  for (int64_t j = whole; j < n; ++j) total += vector_exp(x[j] - row_top);
  return row_top + std::log(total);
}

// d loss / d x for one row of float logits: scale × softmax(x) (the caller takes the one-hot off).
__attribute__((target_clones("avx512f", "avx2", "default"))) void row_gradient(
    const float* __restrict x, float* __restrict out, int64_t n, float log_sum_exp, float scale) {
  for (int64_t j = 0; j < n; ++j) out[j] = vector_exp(x[j] - log_sum_exp) * scale;
}

// bf16 rows are widened into a float row in cache first, and the float gradient narrowed back:
// the kernels above do not vectorize over bf16 directly. The float is built in its bits.
using Bits = std::uint32_t __attribute__((may_alias));

__attribute__((target_clones("avx512f", "avx2", "default"))) void widen_bf16(
    const std::uint16_t* __restrict bf16, float* __restrict out, int64_t n) {
  auto* bits = reinterpret_cast<Bits*>(out);
  for (int64_t j = 0; j < n; ++j) bits[j] = static_cast<std::uint32_t>(bf16[j]) << 16;
}

// Rounded to nearest even, as c10's conversion, without its NaN case (a softmax has none).
__attribute__((target_clones("avx512f", "avx2", "default"))) void narrow_to_bf16(
    const float* __restrict row, std::uint16_t* __restrict out, int64_t n) {
  const auto* bits = reinterpret_cast<const Bits*>(row);
  for (int64_t j = 0; j < n; ++j) {
    out[j] = static_cast<std::uint16_t>((bits[j] + 0x7FFFu + ((bits[j] >> 16) & 1u)) >> 16);
  }
}

// A row of logits as float: the row itself, or widened into `scratch`.
const float* float_row(const float* row, int64_t, std::vector<float>&) { return row; }
const float* float_row(const c10::BFloat16* row, int64_t n, std::vector<float>& scratch) {
  scratch.resize(static_cast<size_t>(n));
  widen_bf16(reinterpret_cast<const std::uint16_t*>(row), scratch.data(), n);
  return scratch.data();
}
const float* float_row(const double* row, int64_t n, std::vector<float>& scratch) {
  scratch.assign(row, row + n);
  return scratch.data();
}

// Writes a float gradient row into `out`, from `write(float* row)`.
template <typename T, typename Write>
void gradient_row(T* out, int64_t n, std::vector<float>& scratch, const Write& write) {
  if constexpr (std::is_same_v<T, float>) {
    write(out);
  } else {
    scratch.resize(static_cast<size_t>(n));
    write(scratch.data());
    if constexpr (std::is_same_v<T, c10::BFloat16>) {
      narrow_to_bf16(scratch.data(), reinterpret_cast<std::uint16_t*>(out), n);
    } else {
      std::copy(scratch.begin(), scratch.end(), out);
    }
  }
}

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
    AT_DISPATCH_FLOATING_TYPES_AND(at::kBFloat16, logits.scalar_type(), "token_cross_entropy", [&] {
      const scalar_t* x = logits.data_ptr<scalar_t>();
      float* l = lse.data_ptr<float>();
      double* loss = per_row.data_ptr<double>();
      at::parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
        std::vector<float> scratch;
        for (int64_t r = begin; r < end; ++r) {
          const int64_t t = target[r];
          if (t < 0 || t >= vocab) {
            throw Error("token cross-entropy: target " + std::to_string(t) + " of row " +
                        std::to_string(r) + " is outside the vocabulary of " +
                        std::to_string(vocab));
          }
          const float* row = float_row(x + r * vocab, vocab, scratch);
          l[r] = row_log_sum_exp(row, vocab);
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
    AT_DISPATCH_FLOATING_TYPES_AND(at::kBFloat16, logits.scalar_type(), "token_cross_entropy", [&] {
      const scalar_t* x = logits.data_ptr<scalar_t>();
      scalar_t* g = grad.data_ptr<scalar_t>();
      at::parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
        std::vector<float> widened, gradient;
        for (int64_t r = begin; r < end; ++r) {
          const float* row = float_row(x + r * vocab, vocab, widened);
          const int64_t t = target[r];
          gradient_row(g + r * vocab, vocab, gradient, [&](float* out) {
            row_gradient(row, out, vocab, lse[r], scale);
            // The target's softmax less one, before any rounding to the logits' type.
            out[t] = (vector_exp(row[t] - lse[r]) - 1.0f) * scale;
          });
        }
      });
    });
    return {grad, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor TokenCrossEntropyLoss::operator()(const at::Tensor& logits, const at::Tensor& targets,
                                             Reduction reduction) const {
  const int64_t vocab = logits.size(-1);
  at::Tensor rows = logits.reshape({-1, vocab});
  if (rows.scalar_type() != at::kBFloat16 && rows.scalar_type() != at::kFloat) {
    rows = rows.to(at::kFloat);
  }
  return FusedTokenCrossEntropy::apply(rows.contiguous(),
                                       targets.reshape({-1}).to(at::kLong).contiguous(),
                                       reduction == Reduction::kMean);
}

}  // namespace loom::models
