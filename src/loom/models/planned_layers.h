// The layers a tensor plan (tensor_plan.h) can split: a linear, an embedding table, a LayerNorm,
// an RMSNorm and a dropout. Each runs as torch's own module does (the same parameters under the
// same names, drawn as torch::nn's are) until a plan hands it a style and a group; from then on its
// forward runs that style's collectives (tensor_parallel.h), so a model written with them reads as
// one process's and is split from outside. A style decides, per forward, between plain tensor
// parallelism (inputs and outputs whole on every rank) and, where the group splits the sequence
// (splits_sequence_now), this rank's positions in and out of the regions between split products.
//
// Threading: as a torch::nn::Module's. The group must outlive the layer's use.
#pragma once

#include <torch/nn/module.h>

#include <cstdint>
#include <vector>

#include "loom/models/tensor_parallel.h"
#include "loom/models/tensor_plan.h"

namespace loom::models {

// What a plan applies a style to.
class PlannedLayer : public torch::nn::Module {
 public:
  // Whether the layer takes `style` (a linear: colwise and rowwise; an embedding: vocabulary and
  // sequence; a LayerNorm, an RMSNorm and a dropout: sequence).
  virtual bool takes(const TensorStyle& style) const = 0;
  // How `style` cuts this layer's parameters over `ranks` ranks, by their own names ("weight").
  virtual TensorSplits cuts(const TensorStyle& style, int64_t ranks) const = 0;
  // Keeps this rank's slices of what `style` cuts, and runs the style over `group` from now on;
  // returns the cuts (cuts(style, group.size())).
  TensorSplits take(const TensorStyle& style, TensorGroup& group);

 protected:
  // Whether this forward runs on this rank's positions (the group splits the sequence).
  bool by_sequence() const { return group_ && splits_sequence_now(*group_); }

  TensorStyle style_;
  TensorGroup* group_ = nullptr;  // once a plan split the layer
  bool cut_ = false;              // whether the style cut any of its parameters
};

// y = x W^T + b over the last dimension of `x`, in one fused product. (The C++ frontend's
// torch::nn::Linear multiplies an input of more than two dimensions with matmul and adds the bias
// in a pass of its own; ATen's linear folds the leading dimensions of a contiguous input into one
// addmm, bias included: on a GPT's [8, 256, C] bf16 activations the second pass cost 0.05-0.15 ms
// per product on the test machine.)
class Linear : public PlannedLayer {
 public:
  Linear(int64_t in, int64_t out, bool bias = true);
  at::Tensor forward(const at::Tensor& x);
  bool takes(const TensorStyle& style) const override;
  TensorSplits cuts(const TensorStyle& style, int64_t ranks) const override;
  // This rank's part of the outputs, of parts() (a column split's rank and group size; 0 of 1
  // otherwise): an attention reads which heads it holds from its input projection.
  int64_t part() const;
  int64_t parts() const;

  // LoRA (Hu et al., 2021): adds (alpha / rank) B A dropout(x) to the output, A [rank, in]
  // drawn as a linear's weight is, B [out, rank] zero (so the output starts unchanged), as the
  // child modules "lora_A" and "lora_B" (PEFT's names: "<linear>.lora_A.weight"). The weight and
  // bias stop learning. Under a plan, B is cut as the weight's outputs (colwise) or A as its
  // inputs (rowwise), the other whole with its gradient summed over the group where each rank
  // sees only its part of the product.
  void add_adapter(int64_t rank, double alpha, double dropout);
  bool has_adapter() const { return static_cast<bool>(lora_a_); }

  at::Tensor weight, bias;  // [out, in], [out] (undefined without a bias)

 private:
  // The adapter's term for `x` as this layer's style sees it (see forward).
  at::Tensor adapter(const at::Tensor& x);

  std::shared_ptr<torch::nn::Module> lora_a_, lora_b_;
  at::Tensor lora_a_weight_, lora_b_weight_;  // their "weight"s
  double lora_scale_ = 0, lora_dropout_ = 0;
};

// A lookup table of `rows` vectors; attend() is its transpose product, for an output head tied
// to it (a language model's logits).
class Embedding : public PlannedLayer {
 public:
  Embedding(int64_t rows, int64_t dim);
  // The rows of `ids` [B, T] (positions: [1, T]); by the sequence, this rank's positions' rows.
  at::Tensor forward(const at::Tensor& ids);
  // h W^T: cut by the vocabulary, this rank's share of the logits (of every position: gathered
  // by the sequence); whole, every position's whole logits.
  at::Tensor attend(const at::Tensor& h);
  bool takes(const TensorStyle& style) const override;
  TensorSplits cuts(const TensorStyle& style, int64_t ranks) const override;

  at::Tensor weight;  // [rows, dim]

 private:
  at::Tensor own_rows(const at::Tensor& ids);  // see embedding's forward
};

// Layer normalisation over the last dimension, with a learned scale and shift.
class LayerNorm : public PlannedLayer {
 public:
  explicit LayerNorm(int64_t dim, double eps = 1e-5);
  at::Tensor forward(const at::Tensor& x);
  bool takes(const TensorStyle& style) const override;
  TensorSplits cuts(const TensorStyle&, int64_t) const override { return {}; }

  at::Tensor weight, bias;

 private:
  int64_t dim_;
  double eps_;
};

// Root-mean-square normalisation over the last dimension with a learned scale (Zhang & Sennrich,
// 2019; the Llama's): x / sqrt(mean(x^2) + eps) computed in fp32 whatever x's type, cast back to
// it, then scaled, as Hugging Face's LlamaRMSNorm computes it.
class RmsNorm : public PlannedLayer {
 public:
  explicit RmsNorm(int64_t dim, double eps = 1e-5);
  at::Tensor forward(const at::Tensor& x);
  bool takes(const TensorStyle& style) const override;
  TensorSplits cuts(const TensorStyle&, int64_t) const override { return {}; }

  at::Tensor weight;

 private:
  double eps_;
};

// Dropout whose masks are drawn per sample (draw_key.h), so every layout draws one process's;
// by the sequence, this rank's positions' part of the whole sequence's masks.
class Dropout : public PlannedLayer {
 public:
  explicit Dropout(double p) : p_(p) {}
  at::Tensor forward(const at::Tensor& x);
  bool takes(const TensorStyle& style) const override;
  TensorSplits cuts(const TensorStyle&, int64_t) const override { return {}; }
  double p() const { return p_; }

 private:
  double p_;
};

}  // namespace loom::models
