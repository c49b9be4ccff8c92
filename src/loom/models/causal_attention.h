// Causal self-attention's core, softmax(q k^T / sqrt(d) + mask) v, computed in blocks of query
// rows so that no block multiplies by the keys its rows may not see.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>

namespace loom::models {

// Query blocks for `rows` query positions: rows of at least 128, at most 4 blocks. Measured on
// the 2-core test machine (forward and backward of one layer's attention, heads of 64, with
// Loom's caching allocator): context 256, 48 batched heads, bf16 4.7-5.1 ms whole and 4.4 ms in 2
// blocks, fp32 15.3 and 13.2 ms (4 blocks were slower again: the products shrink); context
// 1024, 12 heads, in 4 blocks: bf16 21.5 -> 14.9 ms, fp32 56 -> 38 ms.
int64_t causal_query_blocks(int64_t rows);

// `q` [N, t, d]: the queries of positions past .. past + t - 1; `k`, `v` [N, past + t, d];
// `bias` [past + t, past + t]: 0 where a query may see a key, -inf past it, in q's type. Block
// [s, e) of the query rows attends only to keys 0 .. past + e - 1 (the keys after those are
// masked for all its rows): with 2 blocks a quarter of the products and of the softmax is never
// done, and each block's scores stay small enough for the cache. The mask is still added (in the
// product itself, by baddbmm) inside each block's triangle. `weights_dropout` is applied to each
// block's attention weights. Returns [N, t, d]; equal to the unblocked result but for the order
// of the softmax's sums.
at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const at::Tensor& bias, int64_t past, int64_t blocks,
                            const std::function<at::Tensor(const at::Tensor&)>& weights_dropout);

}  // namespace loom::models
