// Decoding a language model one position at a time: the keys and values each layer computed for
// the positions decoded so far (KvCache), the models that can decode with them (CachedDecoder: the
// GPT and the Llama), and sampling ids from their logits (generate, as `loom generate` does).
#pragma once

#include <ATen/Tensor.h>

#include <cstdint>
#include <vector>

namespace loom::models {

class ZooNetwork;  // module_model.h

// The keys and values every layer computed for the positions decoded so far, so that a new
// position attends to them without running the earlier positions again.
struct KvCache {
  struct Layer {
    at::Tensor keys, values;  // [B, heads, positions, head width]
  };
  std::vector<Layer> layers;
  int64_t length() const {
    return layers.empty() || !layers.front().keys.defined() ? 0 : layers.front().keys.size(2);
  }
};

// A language model that can run the positions after those in a cache: a network of the zoo that
// is one (the GPT, the Llama) derives from it too.
class CachedDecoder {
 public:
  virtual ~CachedDecoder() = default;
  // Logits [B, n, vocab] of `ids` [B, n], the positions that follow those in `cache`, whose keys
  // and values join it; the same logits a full forward pass gives those positions. Throws Error
  // past the context.
  virtual at::Tensor forward_cached(const at::Tensor& ids, KvCache& cache) = 0;
  // The most positions it sees at once.
  virtual int64_t context() const = 0;
};

// `network` as a cached decoder. Throws Error naming `what` for a network that is not one.
CachedDecoder& decoder_of(ZooNetwork& network, const char* what);

// forward_cached of `network` (see CachedDecoder). Throws Error for a network that cannot decode.
at::Tensor forward_cached(ZooNetwork& network, const at::Tensor& ids, KvCache& cache);

struct Sampling {
  double temperature = 1.0;  // 0: always the likeliest token
  int64_t top_k = 0;         // draw from the k likeliest only; 0: from all
  uint64_t seed = 0;         // the draws are a pure function of it
  int64_t stop_id = -1;      // end early after this token (end-of-text); -1: never
  // Cache the keys and values of the positions decoded; false: run the whole window again for
  // every token (the same ids: what the cache is measured against).
  bool use_cache = true;
};

// Up to `tokens` ids drawn one at a time after `prompt` (at least one id), with a KV cache, in
// evaluation mode and without gradients (the model's mode is restored). Past the context the
// window slides: each id is drawn from the last `context` ids (a longer prompt keeps its last
// `context`), each such step running the whole window again. Throws ConfigError naming --tokens
// when `tokens` is negative, Error for a network that cannot decode.
std::vector<int64_t> generate(ZooNetwork& network, const std::vector<int64_t>& prompt,
                              int64_t tokens, const Sampling& sampling);

}  // namespace loom::models
