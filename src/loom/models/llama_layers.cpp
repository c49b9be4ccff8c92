#include "loom/models/llama_layers.h"

#include <ATen/ATen.h>

#include <limits>
#include <utility>

#include "loom/models/causal_attention.h"

namespace loom::models::llama {

Attention::Attention(const LlamaConfig& c, std::shared_ptr<Rotary> rotary)
    : head_dim_(c.n_embd / c.n_head), rotary_(std::move(rotary)) {
  const int64_t kv_width = c.n_kv_head * head_dim_;
  q_proj_ = register_module("q_proj", std::make_shared<Linear>(c.n_embd, c.n_embd, false));
  k_proj_ = register_module("k_proj", std::make_shared<Linear>(c.n_embd, kv_width, false));
  v_proj_ = register_module("v_proj", std::make_shared<Linear>(c.n_embd, kv_width, false));
  o_proj_ = register_module("o_proj", std::make_shared<Linear>(c.n_embd, c.n_embd, false));
}

at::Tensor Attention::forward(const at::Tensor& x, KvCache::Layer* cache) {
  // [B, T, C] -> [B, heads, T, head_dim], the heads this rank holds under tensor parallelism, of
  // every position (where the group splits the sequence, x holds this rank's positions and the
  // projections gather them).
  const at::Tensor queries = q_proj_->forward(x);
  const int64_t b = queries.size(0), t = queries.size(1), d = head_dim_;
  const auto per_head = [&](const at::Tensor& y) {
    return y.view({b, t, y.size(2) / d, d}).transpose(1, 2);
  };
  at::Tensor q = per_head(queries);
  at::Tensor k = per_head(k_proj_->forward(x));
  at::Tensor v = per_head(v_proj_->forward(x));
  const int64_t past = cache && cache->keys.defined() ? cache->keys.size(2) : 0;
  q = rotary_->apply(q, past);
  k = rotary_->apply(k, past);
  if (cache) {
    if (past > 0) {
      k = at::cat({cache->keys, k}, 2);
      v = at::cat({cache->values, v}, 2);
    }
    cache->keys = k;
    cache->values = v;
  }
  // Each key/value head serves `group` query heads in a row: repeated so that torch's fused
  // kernels (which take as many of each) run them.
  const int64_t heads = q.size(1), group = heads / k.size(1);
  if (group > 1) {
    k = k.repeat_interleave(group, 1);
    v = v.repeat_interleave(group, 1);
  }
  at::Tensor y;  // [B, heads, T, head_dim]
  if (past == 0 || t == 1) {
    // Every position from the first, or one new position, which sees every key: torch's fused
    // kernel, causal or not.
    y = at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/past == 0);
  } else {
    // New position i is position past + i: it sees keys 0 .. past + i.
    const int64_t keys = past + t;
    const at::Tensor mask =
        at::full({keys, keys}, -std::numeric_limits<float>::infinity(), q.options()).triu(1);
    y = causal_attention(q.reshape({b * heads, t, d}), k.reshape({b * heads, keys, d}),
                         v.reshape({b * heads, keys, d}), mask, past, causal_query_blocks(t),
                         [](const at::Tensor& w) { return w; })
            .view({b, heads, t, d});
  }
  return o_proj_->forward(y.transpose(1, 2).reshape({b, t, heads * d}));
}

Mlp::Mlp(const LlamaConfig& c) {
  gate_proj_ = register_module("gate_proj", std::make_shared<Linear>(c.n_embd, c.hidden, false));
  up_proj_ = register_module("up_proj", std::make_shared<Linear>(c.n_embd, c.hidden, false));
  down_proj_ = register_module("down_proj", std::make_shared<Linear>(c.hidden, c.n_embd, false));
}

at::Tensor Mlp::forward(const at::Tensor& x) {
  return down_proj_->forward(at::silu(gate_proj_->forward(x)) * up_proj_->forward(x));
}

Block::Block(const LlamaConfig& c, std::shared_ptr<Rotary> rotary) {
  input_layernorm_ =
      register_module("input_layernorm", std::make_shared<RmsNorm>(c.n_embd, c.norm_eps));
  self_attn_ = register_module("self_attn", std::make_shared<Attention>(c, std::move(rotary)));
  post_attention_layernorm_ =
      register_module("post_attention_layernorm", std::make_shared<RmsNorm>(c.n_embd, c.norm_eps));
  mlp_ = register_module("mlp", std::make_shared<Mlp>(c));
}

at::Tensor Block::forward(const at::Tensor& x, KvCache::Layer* cache) {
  const at::Tensor h = x + self_attn_->forward(input_layernorm_->forward(x), cache);
  return h + mlp_->forward(post_attention_layernorm_->forward(h));
}

}  // namespace loom::models::llama
