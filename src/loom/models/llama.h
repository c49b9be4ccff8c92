// The Llama family (Llama 2, Llama 3.x): a decoder-only transformer language model with RMSNorm,
// rotary positions (with Llama 3.1's frequency scaling), grouped-query attention and a SwiGLU
// MLP, without biases or dropout; its output head untied from the token embedding, or tied (the
// Llama 3.2 1B and 3B). Named as Hugging Face's LlamaForCausalLM names its tensors, less its
// "model." prefix: embed_tokens, layers.<i>.{input_layernorm, self_attn.{q,k,v,o}_proj,
// post_attention_layernorm, mlp.{gate,up,down}_proj}, norm, lm_head. Weights start as the GPT's
// do: normal(0, 0.02), the residual projections (o_proj, down_proj) scaled by 1/sqrt(2 n_layer),
// the norms' scales one.
//
// The same chain of blocks as the GPT, so pipelines, recompute, ZeRO-1/2/3 and tensor
// parallelism work alike: "embedding", "layers.0" .. "layers.<n_layer-1>", "head". Its tensor
// plan (llama.cpp) splits q, k and v by heads, o_proj by its inputs, gate and up by the hidden
// width, down by its inputs, and the vocabulary.
//
// forward: token ids int64 [B, T] (T <= seq_len) -> logits [B, T, vocab]; it decodes with a KV
// cache too (decoding.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "loom/core/config.h"
#include "loom/models/decoding.h"
#include "loom/models/module_model.h"
#include "loom/models/rotary.h"

namespace loom::models {

struct LlamaConfig {
  int64_t n_layer = 4;
  int64_t n_head = 4;
  int64_t n_kv_head = 2;  // key/value heads; divides n_head
  int64_t n_embd = 128;
  int64_t hidden = 384;  // the MLP's width
  int64_t seq_len = 64;  // the longest context a forward pass takes
  int64_t vocab = 4000;
  double rope_theta = 10000;
  RopeScaling rope_scaling;
  double norm_eps = 1e-5;
  bool tie_embeddings = true;  // the head is embed_tokens' matrix
};

// Named shapes: "llama_tiny" (4 layers, 4 heads and 2 key/value heads, 128 wide, MLP 384,
// context 64: for tests and CPUs), and Llama 3.2 1B ("llama3.2_1b": 16 layers, 32 heads, 8
// key/value heads, 2048 wide, MLP 8192, tied), 3B ("llama3.2_3b": 28, 24, 8, 3072, 8192, tied)
// and Llama 3.1 8B ("llama3.1_8b": 32, 32, 8, 4096, 14336, untied), each with theta 500,000,
// Llama 3.1's frequency scaling (factor 32 for 3.2, 8 for 3.1, from 8,192 positions), a
// vocabulary of 128,256 and a context of 8,192. Throws ConfigError naming model.llama.preset
// for another name.
LlamaConfig llama_preset(const std::string& name);

// Throws ConfigError naming the key when the shape cannot be (n_embd not a multiple of n_head,
// n_head not a multiple of n_kv_head, an odd head width, sizes below 1).
std::shared_ptr<ZooNetwork> make_llama(const LlamaConfig& config);

// Parameters of the model with this shape (a tied matrix counted once).
int64_t llama_parameter_count(const LlamaConfig& config);

// Training FLOPs (forward and backward) per token at the full context: 6 N + 12 L d T, N the
// parameters that multiply (the token embedding's lookup left out unless it is the head too).
double llama_training_flops_per_token(const LlamaConfig& config);

// The shape model.llama describes: its preset with the sizes it sets, the token data's
// vocabulary, and a context of `seq_len` (0: the preset's).
LlamaConfig llama_config(const LlamaModelConfig& model, int64_t vocab, int64_t seq_len);

}  // namespace loom::models
