#include "loom/models/gpt_layers.h"

#include <limits>
#include <utility>

#include "loom/models/causal_attention.h"
#include "loom/models/draw_key.h"
#include "loom/models/linear.h"

namespace loom::models::gpt {
namespace {

// A split sublayer's column-split product of `x`: x whole on every rank (whose gradient the
// group sums), or this rank's positions, gathered.
at::Tensor column_product(const torch::nn::Linear& layer, const at::Tensor& x, TensorGroup& group,
                          bool by_sequence) {
  if (by_sequence) return gathered_linear(x, layer->weight, layer->bias, group);
  return linear(layer, enter_split(x, group));
}

// Out of its row-split product: this rank's partial sums `partial` summed over the group, the
// whole bias added after the sum, then dropout; whole on every rank, or this rank's positions
// (the bias then used on those only: its gradient summed over the group).
at::Tensor out_of_split(const at::Tensor& partial, const at::Tensor& bias,
                        torch::nn::Dropout dropout, TensorGroup& group, bool by_sequence) {
  if (!by_sequence) return dropout_of(dropout, leave_split(partial, group) + bias, nullptr);
  return dropout_of(dropout, scatter_sequence(partial, group) + enter_split(bias, group), &group);
}

}  // namespace

at::Tensor CausalMask::first(int64_t n, at::ScalarType dtype) {
  if (n > length_) {
    masks_.clear();
    length_ = n;
  }
  at::Tensor& mask = masks_[dtype];
  if (!mask.defined()) {
    mask = at::full({length_, length_}, -std::numeric_limits<float>::infinity()).triu(1).to(dtype);
  }
  return mask.narrow(0, 0, n).narrow(1, 0, n);
}

at::Tensor layer_norm(torch::nn::LayerNorm norm, const at::Tensor& x, TensorGroup* by_sequence) {
  if (!by_sequence) return norm->forward(x);
  const auto& options = norm->options;
  return at::layer_norm(x, options.normalized_shape(), enter_split(norm->weight, *by_sequence),
                        enter_split(norm->bias, *by_sequence), options.eps());
}

at::Tensor dropout_of(const torch::nn::Dropout& dropout, const at::Tensor& x,
                      TensorGroup* by_sequence) {
  const double p = dropout->options.p();
  if (!by_sequence) return keyed_dropout(x, p, dropout->is_training());
  return sequence_dropout(x, p, dropout->is_training(), *by_sequence);
}

CausalSelfAttention::CausalSelfAttention(const GptConfig& c, std::shared_ptr<CausalMask> mask)
    : heads_(c.n_head), width_(c.n_embd), mask_(std::move(mask)) {
  c_attn_ = register_module("c_attn", torch::nn::Linear(c.n_embd, 3 * c.n_embd));
  c_proj_ = register_module("c_proj", torch::nn::Linear(c.n_embd, c.n_embd));
  attn_dropout_ = register_module("attn_dropout", torch::nn::Dropout(c.dropout));
  resid_dropout_ = register_module("resid_dropout", torch::nn::Dropout(c.dropout));
}

void CausalSelfAttention::split(TensorGroup& group) {
  keep_slice(c_attn_->weight, kQueryKeyValue, group);
  keep_slice(c_attn_->bias, kQueryKeyValue, group);
  keep_slice(c_proj_->weight, kByInputs, group);
  heads_ /= group.size();
  width_ /= group.size();
  group_ = &group;
}

at::Tensor CausalSelfAttention::forward(const at::Tensor& x, KvCache::Layer* cache,
                                        bool by_sequence) {
  // [B, T, 3C] -> q, k, v as [B, heads, T, head] (this rank's heads under tensor parallelism,
  // of every position: gathered under sequence parallelism)
  const at::Tensor fused =
      group_ ? column_product(c_attn_, x, *group_, by_sequence) : linear(c_attn_, x);
  const int64_t b = fused.size(0), t = fused.size(1), head = width_ / heads_;
  const auto qkv = fused.split(width_, 2);
  const auto per_head = [&](const at::Tensor& y) {
    return y.view({b, t, heads_, head}).transpose(1, 2);
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
    y = causal_attention(q.reshape({b * heads_, t, head}), k.reshape({b * heads_, keys, head}),
                         v.reshape({b * heads_, keys, head}), mask_->first(keys, q.scalar_type()),
                         past, causal_query_blocks(t),
                         [this, b](const at::Tensor& w) { return weights_dropout(w, b); })
            .view({b, heads_, t, head});
  }
  y = y.transpose(1, 2).contiguous().view({b, t, width_});
  if (!group_) return dropout_of(resid_dropout_, linear(c_proj_, y), nullptr);
  // Each rank's heads' share of the projection, summed.
  return out_of_split(at::linear(y, c_proj_->weight), c_proj_->bias, resid_dropout_, *group_,
                      by_sequence);
}

// Dropout of attention weights [B x heads, rows, keys], its mask drawn per sample (draw_key.h).
// Split by heads, each rank draws the mask of every head, as one process does, and keeps its own
// heads': the same masks, and the ranks' draws stay in step for the dropouts after.
bool CausalSelfAttention::draws_weights_dropout() const {
  return attn_dropout_->is_training() && attn_dropout_->options.p() > 0;
}

at::Tensor CausalSelfAttention::weights_dropout(const at::Tensor& w, int64_t b) {
  if (!draws_weights_dropout()) return w;
  const double p = attn_dropout_->options.p();
  const int64_t ranks = group_ ? group_->size() : 1, rank = group_ ? group_->rank() : 0;
  const at::Tensor mask =
      dropout_mask({b, heads_ * ranks, w.size(1), w.size(2)}, p, w.options().requires_grad(false));
  return w * mask.narrow(1, rank * heads_, heads_).reshape(w.sizes());
}

Mlp::Mlp(const GptConfig& c) {
  c_fc_ = register_module("c_fc", torch::nn::Linear(c.n_embd, 4 * c.n_embd));
  c_proj_ = register_module("c_proj", torch::nn::Linear(4 * c.n_embd, c.n_embd));
  dropout_ = register_module("dropout", torch::nn::Dropout(c.dropout));
}

void Mlp::split(TensorGroup& group) {
  keep_slice(c_fc_->weight, kByOutputs, group);
  keep_slice(c_fc_->bias, kByOutputs, group);
  keep_slice(c_proj_->weight, kByInputs, group);
  group_ = &group;
}

at::Tensor Mlp::forward(const at::Tensor& x, bool by_sequence) {
  if (!group_) return dropout_of(dropout_, linear(c_proj_, at::gelu(linear(c_fc_, x))), nullptr);
  const at::Tensor hidden = at::gelu(column_product(c_fc_, x, *group_, by_sequence));
  return out_of_split(at::linear(hidden, c_proj_->weight), c_proj_->bias, dropout_, *group_,
                      by_sequence);
}

GptBlock::GptBlock(const GptConfig& c, std::shared_ptr<CausalMask> mask) {
  ln_1_ = register_module("ln_1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.n_embd})));
  attn_ = register_module("attn", std::make_shared<CausalSelfAttention>(c, std::move(mask)));
  ln_2_ = register_module("ln_2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.n_embd})));
  mlp_ = register_module("mlp", std::make_shared<Mlp>(c));
}

at::Tensor GptBlock::forward(const at::Tensor& x, KvCache::Layer* cache) {
  TensorGroup* by_sequence = group_ && group_->splits_sequence() && !cache ? group_ : nullptr;
  const at::Tensor h =
      x + attn_->forward(layer_norm(ln_1_, x, by_sequence), cache, by_sequence != nullptr);
  return h + mlp_->forward(layer_norm(ln_2_, h, by_sequence), by_sequence != nullptr);
}

void GptBlock::split(TensorGroup& group) {
  attn_->split(group);
  mlp_->split(group);
  group_ = &group;
}

}  // namespace loom::models::gpt
