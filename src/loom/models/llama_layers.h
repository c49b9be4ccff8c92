// The Llama's transformer layer (models/llama.h) and its parts, written as one process runs them
// and named as Hugging Face's LlamaDecoderLayer names them: grouped-query self-attention with
// rotary positions (self_attn: q_proj, k_proj, v_proj, o_proj), the SwiGLU MLP (mlp: gate_proj,
// up_proj, down_proj) and pre-RMSNorm residual blocks (input_layernorm,
// post_attention_layernorm). No biases, no dropout. Tensor parallelism splits them from
// outside, by the Llama's plan (llama.cpp): the attention reads how many query and key/value
// heads it holds from its projections' outputs.
#pragma once

#include <torch/nn/module.h>

#include <cstdint>
#include <memory>

#include "loom/models/decoding.h"
#include "loom/models/llama.h"
#include "loom/models/planned_layers.h"
#include "loom/models/rotary.h"

namespace loom::models::llama {

// Self-attention in which groups of query heads share a key/value head (GQA, Ainslie et al.,
// 2023): n_head queries, n_kv_head keys and values, each key/value head serving n_head /
// n_kv_head consecutive query heads.
class Attention : public torch::nn::Module {
 public:
  Attention(const LlamaConfig& c, std::shared_ptr<Rotary> rotary);
  // With a cache, `x` holds the positions after the cached ones: they attend to those too, and
  // their keys and values join the cache.
  at::Tensor forward(const at::Tensor& x, KvCache::Layer* cache);

  std::shared_ptr<Linear> q_proj_, k_proj_, v_proj_, o_proj_;

 private:
  int64_t head_dim_;
  std::shared_ptr<Rotary> rotary_;  // the model's, shared by its layers
};

// down(silu(gate(x)) * up(x)) (Shazeer, 2020).
class Mlp : public torch::nn::Module {
 public:
  explicit Mlp(const LlamaConfig& c);
  at::Tensor forward(const at::Tensor& x);

  std::shared_ptr<Linear> gate_proj_, up_proj_, down_proj_;
};

// One pre-RMSNorm layer: attention, then the MLP, each added back to its input.
class Block : public torch::nn::Module {
 public:
  Block(const LlamaConfig& c, std::shared_ptr<Rotary> rotary);
  at::Tensor forward(const at::Tensor& x, KvCache::Layer* cache = nullptr);
  // The projections back into the residual stream (their initial weights are scaled by depth).
  std::vector<at::Tensor> residual_projections() {
    return {self_attn_->o_proj_->weight, mlp_->down_proj_->weight};
  }

 private:
  std::shared_ptr<RmsNorm> input_layernorm_, post_attention_layernorm_;
  std::shared_ptr<Attention> self_attn_;
  std::shared_ptr<Mlp> mlp_;
};

}  // namespace loom::models::llama
