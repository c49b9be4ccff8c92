// The GPT-2 family: a decoder-only transformer language model built as nanoGPT builds it (GPT-2
// itself used GELU's tanh approximation; this is the exact GELU). Learned token and position
// embeddings, then n_layer pre-LayerNorm blocks (causal self-attention, then an MLP four times as
// wide with exact GELU, each added back to its input), a final LayerNorm, and the language-model
// head, which is the token embedding's matrix again (tied: one tensor, "wte.weight", trained by
// both uses). Dropout after the embeddings, on the attention weights and after each residual
// branch. Weights start as GPT-2's: normal(0, 0.02), the residual projections scaled by 1/sqrt(2
// n_layer), biases zero.
//
// Tensor parallelism splits its layers (models/gpt_layers.h), its token embedding and its head;
// with sequence parallelism the activations between the layers' split products, [B, T / ranks,
// C], are each rank's positions.
//
// forward: token ids int64 [B, T] (T <= seq_len) -> logits [B, T, vocab]; it decodes with a KV
// cache too (decoding.h). Blocks (pipeline
// stages are made of them): "embedding", "h.0" .. "h.<n_layer-1>", "head"; the head's matrix
// belongs to the embedding block.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "loom/core/config.h"
#include "loom/models/decoding.h"
#include "loom/models/module_model.h"

namespace loom::models {

struct GptConfig {
  int64_t n_layer = 4;
  int64_t n_head = 4;
  int64_t n_embd = 128;
  int64_t seq_len = 64;  // the longest context (learned positions)
  int64_t vocab = 4000;
  double dropout = 0.0;
  // GELU's tanh approximation, as GPT-2 itself computed it (Hugging Face's "gelu_new"), for a
  // checkpoint trained so; nanoGPT's exact GELU otherwise.
  bool tanh_gelu = false;
};

// Named shapes: "gpt2" (GPT-2 small: 12 layers, 12 heads, 768 wide, context 1024, vocabulary
// 50257, 124M parameters), "gpt_mini" (nanoGPT's Shakespeare model: 6, 6, 384, context 256) and
// "gpt_tiny" (nanoGPT's CPU setting: 4, 4, 128, context 64); the last two take `vocab`, the
// tokenizer's. Throws ConfigError naming model.gpt.preset for another name.
GptConfig gpt_preset(const std::string& name, int64_t vocab);

// Throws ConfigError naming the key when the shape cannot be (n_embd not a multiple of n_head,
// sizes below 1).
std::shared_ptr<ZooNetwork> make_gpt(const GptConfig& config);

// Parameters of the model with this shape (the tied matrix counted once).
int64_t gpt_parameter_count(const GptConfig& config);

// Training FLOPs (forward and backward) per token at the full context: 6 N + 12 L d T, N the
// parameters without the position table (PaLM, appendix B).
double gpt_training_flops_per_token(const GptConfig& config);

// The shape model.gpt describes: its preset with the sizes it sets, the token data's
// vocabulary, and a context of `seq_len` (0: the preset's).
GptConfig gpt_config(const GptModelConfig& model, int64_t vocab, int64_t seq_len);

}  // namespace loom::models
