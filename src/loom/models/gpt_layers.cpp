#include "loom/models/gpt_layers.h"

#include <limits>
#include <utility>

#include "loom/models/causal_attention.h"
#include "loom/models/draw_key.h"

namespace loom::models::gpt {

at::Tensor CausalMask::first(int64_t n, at::ScalarType dtype, at::Device device) {
  if (n > length_ || (!masks_.empty() && masks_.begin()->second.device() != device)) {
    masks_.clear();
    length_ = n;
  }
  at::Tensor& mask = masks_[dtype];
  if (!mask.defined()) {
    mask = at::full({length_, length_}, -std::numeric_limits<float>::infinity())
               .triu(1)
               .to(device, dtype);
  }
  return mask.narrow(0, 0, n).narrow(1, 0, n);
}

CausalSelfAttention::CausalSelfAttention(const GptConfig& c, std::shared_ptr<CausalMask> mask)
    : head_size_(c.n_embd / c.n_head), mask_(std::move(mask)) {
  c_attn_ = register_module("c_attn", std::make_shared<Linear>(c.n_embd, 3 * c.n_embd));
  c_proj_ = register_module("c_proj", std::make_shared<Linear>(c.n_embd, c.n_embd));
  attn_dropout_ = register_module("attn_dropout", torch::nn::Dropout(c.dropout));
  resid_dropout_ = register_module("resid_dropout", std::make_shared<Dropout>(c.dropout));
}

at::Tensor CausalSelfAttention::forward(const at::Tensor& x, KvCache::Layer* cache) {
  // [B, T, 3C] -> q, k, v as [B, heads, T, head] (the heads this rank holds under tensor
  // parallelism, of every position)
  const at::Tensor fused = c_attn_->forward(x);
  const int64_t b = fused.size(0), t = fused.size(1), head = head_size_;
  const int64_t width = fused.size(2) / 3, heads = width / head;
  const auto qkv = fused.split(width, 2);
  const auto per_head = [&](const at::Tensor& y) {
    return y.view({b, t, heads, head}).transpose(1, 2);
  };
  at::Tensor q = per_head(qkv[0]), k = per_head(qkv[1]), v = per_head(qkv[2]);
  int64_t past = 0;
  if (cache) {
    if (cache->keys.defined()) {
      past = cache->keys.size(2);
      k = at::cat({cache->keys, k}, 2);
      v = at::cat({cache->values, v}, 2);
    }
    cache->keys = k;
    cache->values = v;
  }
  at::Tensor y;  // [B, heads, T, head]
  if (past == 0 && !draws_weights_dropout()) {
    // torch's fused kernel, on the heads' strided views: as fast as the blocked path in fp32 and
    // 2.4-2.9x faster in bf16 on an AVX2 host (`loom bench kernels`, bench/RESULTS.md session
    // 31), and it keeps no T x T weights for backward.
    y = at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true);
  } else {
    // Dropout drawn by Loom's layout-invariant masks, or cached keys before the queries (new
    // position i is position past + i: it sees keys 0 .. past + i): the blocked path.
    const int64_t keys = past + t;
    y = causal_attention(
            q.reshape({b * heads, t, head}), k.reshape({b * heads, keys, head}),
            v.reshape({b * heads, keys, head}), mask_->first(keys, q.scalar_type(), q.device()),
            past, causal_query_blocks(t),
            [this, b, heads](const at::Tensor& w) { return weights_dropout(w, b, heads); })
            .view({b, heads, t, head});
  }
  y = y.transpose(1, 2).contiguous().view({b, t, width});
  return resid_dropout_->forward(c_proj_->forward(y));
}

// Dropout of attention weights [B x heads, rows, keys], its mask drawn per sample (draw_key.h).
// Split by heads, each rank draws the mask of every head, as one process does, and keeps its own
// heads': the same masks, and the ranks' draws stay in step for the dropouts after.
bool CausalSelfAttention::draws_weights_dropout() const {
  return attn_dropout_->is_training() && attn_dropout_->options.p() > 0;
}

at::Tensor CausalSelfAttention::weights_dropout(const at::Tensor& w, int64_t b, int64_t heads) {
  if (!draws_weights_dropout()) return w;
  const double p = attn_dropout_->options.p();
  const int64_t ranks = c_attn_->parts(), rank = c_attn_->part();
  const at::Tensor mask =
      dropout_mask({b, heads * ranks, w.size(1), w.size(2)}, p, w.options().requires_grad(false));
  return w * mask.narrow(1, rank * heads, heads).reshape(w.sizes());
}

Mlp::Mlp(const GptConfig& c) : approximate_(c.tanh_gelu ? "tanh" : "none") {
  c_fc_ = register_module("c_fc", std::make_shared<Linear>(c.n_embd, 4 * c.n_embd));
  c_proj_ = register_module("c_proj", std::make_shared<Linear>(4 * c.n_embd, c.n_embd));
  dropout_ = register_module("dropout", std::make_shared<Dropout>(c.dropout));
}

at::Tensor Mlp::forward(const at::Tensor& x) {
  return dropout_->forward(c_proj_->forward(at::gelu(c_fc_->forward(x), approximate_)));
}

GptBlock::GptBlock(const GptConfig& c, std::shared_ptr<CausalMask> mask) {
  ln_1_ = register_module("ln_1", std::make_shared<LayerNorm>(c.n_embd));
  attn_ = register_module("attn", std::make_shared<CausalSelfAttention>(c, std::move(mask)));
  ln_2_ = register_module("ln_2", std::make_shared<LayerNorm>(c.n_embd));
  mlp_ = register_module("mlp", std::make_shared<Mlp>(c));
}

at::Tensor GptBlock::forward(const at::Tensor& x, KvCache::Layer* cache) {
  const at::Tensor h = x + attn_->forward(ln_1_->forward(x), cache);
  return h + mlp_->forward(ln_2_->forward(h));
}

}  // namespace loom::models::gpt
