#include "loom/models/causal_attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace loom::models {

int64_t causal_query_blocks(int64_t rows) { return std::clamp<int64_t>(rows / 128, 1, 4); }

at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const at::Tensor& bias, int64_t past, int64_t blocks,
                            const std::function<at::Tensor(const at::Tensor&)>& weights_dropout) {
  const int64_t n = q.size(0), t = q.size(1), d = q.size(2);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  blocks = std::clamp<int64_t>(blocks, 1, std::max<int64_t>(t, 1));
  std::vector<at::Tensor> out;
  out.reserve(static_cast<size_t>(blocks));
  for (int64_t i = 0; i < blocks; ++i) {
    const int64_t first = t * i / blocks, end = t * (i + 1) / blocks, rows = end - first;
    const int64_t seen = past + end;  // keys any row of the block may see
    const at::Tensor block_bias =
        bias.narrow(0, past + first, rows).narrow(1, 0, seen).expand({n, rows, seen});
    const at::Tensor scores = at::baddbmm(block_bias, q.narrow(1, first, rows),
                                          k.narrow(1, 0, seen).transpose(1, 2), /*beta=*/1, scale);
    out.push_back(at::bmm(weights_dropout(scores.softmax(-1)), v.narrow(1, 0, seen)));
  }
  return out.size() == 1 ? out.front() : at::cat(out, 1);
}

}  // namespace loom::models
