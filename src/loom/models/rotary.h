// Rotary position embeddings (Su et al., 2021, RoFormer), as the Llama family and Hugging Face's
// LlamaRotaryEmbedding apply them: the query's and key's head vector is taken as two halves
// (x1, x2), and the pair (x1[i], x2[i]) at position p is turned by the angle p / theta^(2i / d).
// A query then scores a key by their positions' difference alone, so a model has no position
// table and a cached key keeps its rotation. (Meta's own checkpoints pair neighbours (x[2i],
// x[2i+1]) instead; Hugging Face's conversion permutes q_proj's and k_proj's rows to the halves,
// which are what Loom's Llama uses, so a Hugging Face checkpoint loads without a permutation.)
//
// Llama 3.1's frequency scaling stretches a context trained at `original_context` positions by
// `factor`: the slow frequencies (wavelengths above original_context / low_freq_factor) are
// divided by the factor, the fast ones (below original_context / high_freq_factor) kept, and
// those between blended smoothly.
#pragma once

#include <ATen/Tensor.h>

#include <cstdint>
#include <map>

namespace loom::models {

// Llama 3.1's scaling of the rotary frequencies ("rope_scaling" with "rope_type": "llama3" in a
// Hugging Face config.json); factor 0: none.
struct RopeScaling {
  double factor = 0;
  double low_freq_factor = 1;
  double high_freq_factor = 4;
  int64_t original_context = 8192;

  bool enabled() const { return factor > 0; }
};

// The inverse frequencies [head_dim / 2] (fp32): 1 / theta^(2i / head_dim), scaled.
at::Tensor rotary_inverse_frequencies(int64_t head_dim, double theta, const RopeScaling& scaling);

// Turns heads by their positions. Holds the cosines and sines of the positions seen so far, per
// dtype, computed in fp32 on the CPU (the same angles on every device) and kept on the heads'
// device (not a buffer: nothing to train or save; a model moved to another device makes them
// again there). Not thread-safe: as a module's forward.
class Rotary {
 public:
  Rotary(int64_t head_dim, double theta, const RopeScaling& scaling);

  // `x` [B, heads, T, head_dim] at positions first .. first + T - 1, turned.
  at::Tensor apply(const at::Tensor& x, int64_t first);

 private:
  struct Table {
    at::Tensor cos, sin;  // [positions, head_dim]: each frequency's twice (both halves)
  };
  const Table& table(int64_t positions, at::ScalarType dtype, at::Device device);

  at::Tensor inverse_frequencies_;
  std::map<at::ScalarType, Table> tables_;
};

}  // namespace loom::models
