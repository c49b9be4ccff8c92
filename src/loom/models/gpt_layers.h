// The GPT's transformer layer (models/gpt.h) and its parts, written as one process runs them
// (nanoGPT's): causal self-attention, the MLP, pre-LayerNorm residual blocks. Tensor parallelism
// splits them from outside, by the GPT's plan (gpt.cpp, tensor_plan.h): their linears, LayerNorms
// and dropouts are planned layers (planned_layers.h) that run the group's collectives once split.
// The attention reads how many heads it holds from its input projection's output, and which
// they are (for its weights' dropout masks) from that projection's part.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/dropout.h>

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "loom/models/gpt.h"
#include "loom/models/planned_layers.h"

namespace loom::models::gpt {

// The mask every layer's attention adds to its scores: [n, n], 0 where a query may see a key,
// -inf after it. One per model and dtype (fp32, and bf16 under autocast), made at the model's
// context on first use, on the scores' device, and kept (not a buffer: nothing to train or save;
// a model moved to another device makes its masks again there). A forward takes a view
// of its first n positions, so it neither builds nor converts a mask; a longer one (which the
// embedding refuses) would rebuild them.
class CausalMask {
 public:
  explicit CausalMask(int64_t context) : length_(context) {}
  at::Tensor first(int64_t n, at::ScalarType dtype, at::Device device);

 private:
  int64_t length_;
  std::map<at::ScalarType, at::Tensor> masks_;
};

// Causal self-attention: every position attends to itself and the positions before it.
class CausalSelfAttention : public torch::nn::Module {
 public:
  CausalSelfAttention(const GptConfig& c, std::shared_ptr<CausalMask> mask);
  // With a cache, `x` holds the positions after the cached ones: they attend to those too, and
  // their keys and values join the cache.
  at::Tensor forward(const at::Tensor& x, KvCache::Layer* cache);

  std::shared_ptr<Linear> c_attn_, c_proj_;

 private:
  // Whether this forward drops attention weights (training with attn_dropout p > 0): then the
  // blocked causal_attention runs, the masks drawn per sample (draw_key.h); otherwise, without
  // cached keys, torch's scaled_dot_product_attention.
  bool draws_weights_dropout() const;
  at::Tensor weights_dropout(const at::Tensor& w, int64_t b, int64_t heads);

  int64_t head_size_;
  std::shared_ptr<CausalMask> mask_;  // the model's, shared by its layers
  torch::nn::Dropout attn_dropout_{nullptr};
  std::shared_ptr<Dropout> resid_dropout_;
};

class Mlp : public torch::nn::Module {
 public:
  explicit Mlp(const GptConfig& c);
  at::Tensor forward(const at::Tensor& x);

  std::shared_ptr<Linear> c_fc_, c_proj_;

 private:
  std::shared_ptr<Dropout> dropout_;
  const char* approximate_;  // GELU's: "none" or "tanh"
};

// One pre-LayerNorm transformer layer: attention, then the MLP, each added back to its input.
class GptBlock : public torch::nn::Module {
 public:
  GptBlock(const GptConfig& c, std::shared_ptr<CausalMask> mask);
  at::Tensor forward(const at::Tensor& x, KvCache::Layer* cache = nullptr);
  // The projections back into the residual stream (GPT-2 scales their initial weights).
  std::vector<at::Tensor> residual_projections() {
    return {attn_->c_proj_->weight, mlp_->c_proj_->weight};
  }

 private:
  std::shared_ptr<LayerNorm> ln_1_, ln_2_;
  std::shared_ptr<CausalSelfAttention> attn_;
  std::shared_ptr<Mlp> mlp_;
};

}  // namespace loom::models::gpt
