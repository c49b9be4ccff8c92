// The GPT's transformer layer (models/gpt.h) and its parts, with their tensor-parallel split
// (models/tensor_parallel.h): causal self-attention split by heads, the MLP by its hidden width
// (Megatron's column- then row-split products), and under sequence parallelism the LayerNorms,
// dropouts and residual stream between them split by the sequence.
//
// A layer split over a group runs in one of two ways, chosen by each forward (every rank of the
// group the same): plain tensor parallelism, its input and output whole on every rank, or with
// the sequence split, its input and output this rank's positions. Training and evaluation split
// the sequence where the group does (TensorGroup::splits_sequence); cached decoding never does
// (its few new positions do not split).
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "loom/models/gpt.h"
#include "loom/models/tensor_parallel.h"

namespace loom::models::gpt {

// The mask every layer's attention adds to its scores: [n, n], 0 where a query may see a key,
// -inf after it. One per model and dtype (fp32, and bf16 under autocast), made at the model's
// context on first use and kept (not a buffer: nothing to train or save). A forward takes a view
// of its first n positions, so it neither builds nor converts a mask; a longer one (which the
// embedding refuses) would rebuild them.
class CausalMask {
 public:
  explicit CausalMask(int64_t context) : length_(context) {}
  at::Tensor first(int64_t n, at::ScalarType dtype);

 private:
  int64_t length_;
  std::map<at::ScalarType, at::Tensor> masks_;
};

// A LayerNorm of `x`. With `by_sequence`, x is this rank's positions: its weight and bias see
// only theirs, so their gradients are summed over the group (enter_split).
at::Tensor layer_norm(torch::nn::LayerNorm norm, const at::Tensor& x, TensorGroup* by_sequence);
// `dropout`'s dropout of `x`, its masks drawn per sample (draw_key.h). With `by_sequence`, x is
// this rank's positions and their part of the whole sequence's masks is applied.
at::Tensor dropout_of(const torch::nn::Dropout& dropout, const at::Tensor& x,
                      TensorGroup* by_sequence);

// Causal self-attention: every position attends to itself and the positions before it.
class CausalSelfAttention : public torch::nn::Module {
 public:
  CausalSelfAttention(const GptConfig& c, std::shared_ptr<CausalMask> mask);
  // Tensor parallelism: this rank keeps the query, key and value columns of its heads and the
  // matching input columns of the output projection.
  void split(TensorGroup& group);
  // With a cache, `x` holds the positions after the cached ones: they attend to those too, and
  // their keys and values join the cache. `by_sequence`: x and the output are this rank's
  // positions (see the header comment).
  at::Tensor forward(const at::Tensor& x, KvCache::Layer* cache, bool by_sequence);

  torch::nn::Linear c_proj_{nullptr};

 private:
  // Whether this forward drops attention weights (training with attn_dropout p > 0): then the
  // blocked causal_attention runs, the masks drawn per sample (draw_key.h); otherwise, without
  // cached keys, torch's scaled_dot_product_attention.
  bool draws_weights_dropout() const;
  at::Tensor weights_dropout(const at::Tensor& w, int64_t b);

  int64_t heads_, width_;             // this rank's
  TensorGroup* group_ = nullptr;      // tensor parallelism's, once split
  std::shared_ptr<CausalMask> mask_;  // the model's, shared by its layers
  torch::nn::Linear c_attn_{nullptr};
  torch::nn::Dropout attn_dropout_{nullptr}, resid_dropout_{nullptr};
};

class Mlp : public torch::nn::Module {
 public:
  explicit Mlp(const GptConfig& c);
  // Tensor parallelism: this rank keeps its share of the hidden width.
  void split(TensorGroup& group);
  at::Tensor forward(const at::Tensor& x, bool by_sequence);

  torch::nn::Linear c_proj_{nullptr};

 private:
  TensorGroup* group_ = nullptr;
  torch::nn::Linear c_fc_{nullptr};
  torch::nn::Dropout dropout_{nullptr};
};

// One pre-LayerNorm transformer layer: attention, then the MLP, each added back to its input.
class GptBlock : public torch::nn::Module {
 public:
  GptBlock(const GptConfig& c, std::shared_ptr<CausalMask> mask);
  at::Tensor forward(const at::Tensor& x, KvCache::Layer* cache = nullptr);
  void split(TensorGroup& group);
  // The projections back into the residual stream (GPT-2 scales their initial weights).
  std::vector<at::Tensor> residual_projections() {
    return {attn_->c_proj_->weight, mlp_->c_proj_->weight};
  }

 private:
  TensorGroup* group_ = nullptr;
  torch::nn::LayerNorm ln_1_{nullptr}, ln_2_{nullptr};
  std::shared_ptr<CausalSelfAttention> attn_;
  std::shared_ptr<Mlp> mlp_;
};

// How tensor parallelism cuts a layer's weights (Megatron's): the products into a split part by
// their output columns (rows of the weight, with their biases), the products out of it by their
// input columns; their biases stay whole and are added after the sum.
inline constexpr TensorSplit kQueryKeyValue{0, 3};  // c_attn: q, k and v, each by heads

}  // namespace loom::models::gpt
