// The Llama the models' tests build: 2 layers, 4 query heads sharing 2 key/value heads, 16 wide
// (heads of 4), an MLP of 24, a context of 8, theta 10,000.
#pragma once

#include <cstdint>

#include "loom/models/llama.h"

namespace loom::models {

inline LlamaConfig small_llama(bool tied = true, int64_t vocab = 50) {
  LlamaConfig c;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_kv_head = 2;
  c.n_embd = 16;
  c.hidden = 24;
  c.seq_len = 8;
  c.vocab = vocab;
  c.rope_theta = 10000;
  c.tie_embeddings = tied;
  return c;
}

}  // namespace loom::models
