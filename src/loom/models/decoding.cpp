#include "loom/models/decoding.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <limits>
#include <string>

#include "loom/core/error.h"
#include "loom/models/module_model.h"

namespace loom::models {

CachedDecoder& decoder_of(ZooNetwork& network, const char* what) {
  auto* decoder = dynamic_cast<CachedDecoder*>(&network);
  if (!decoder) {
    throw Error(std::string(what) + ": the model cannot decode with a KV cache (gpt and llama can)",
                {{"problem", "not_a_decoder"}});
  }
  return *decoder;
}

at::Tensor forward_cached(ZooNetwork& network, const at::Tensor& ids, KvCache& cache) {
  return decoder_of(network, "cached decoding").forward_cached(ids, cache);
}

std::vector<int64_t> generate(ZooNetwork& network, const std::vector<int64_t>& prompt,
                              int64_t tokens, const Sampling& sampling) {
  CachedDecoder& model = decoder_of(network, "generate");
  if (prompt.empty()) throw ConfigError("--prompt: generation starts from at least one token");
  if (tokens < 0) throw ConfigError("--tokens: " + std::to_string(tokens) + ", at least 0");
  const int64_t context = model.context();
  const bool was_training = network.is_training();
  network.eval();
  at::NoGradGuard no_grad;
  at::Generator draws = at::make_generator<at::CPUGeneratorImpl>(sampling.seed);
  // The model sees at most its context: the last `context` ids of the sequence so far.
  std::vector<int64_t> sequence(
      prompt.end() - std::min<int64_t>(context, static_cast<int64_t>(prompt.size())), prompt.end());
  const auto window = [&] {
    const auto kept = std::min<int64_t>(context, static_cast<int64_t>(sequence.size()));
    return at::tensor(std::vector<int64_t>(sequence.end() - kept, sequence.end()), at::kLong)
        .unsqueeze(0);
  };
  KvCache cache;
  std::vector<int64_t> out;
  at::Tensor next = window();
  for (int64_t i = 0; i < tokens; ++i) {
    at::Tensor logits = model.forward_cached(next, cache).select(1, -1).squeeze(0).to(at::kFloat);
    int64_t id = 0;
    if (sampling.temperature <= 0) {
      id = logits.argmax().item<int64_t>();
    } else {
      logits = logits / sampling.temperature;
      if (sampling.top_k > 0 && sampling.top_k < logits.size(0)) {
        const at::Tensor kth = std::get<0>(logits.topk(sampling.top_k)).select(0, -1);
        logits = logits.masked_fill(logits < kth, -std::numeric_limits<float>::infinity());
      }
      id = at::multinomial(logits.softmax(-1), 1, false, draws).item<int64_t>();
    }
    out.push_back(id);
    if (id == sampling.stop_id) break;
    sequence.push_back(id);
    if (sampling.use_cache && cache.length() < context) {
      next = at::full({1, 1}, id, at::kLong);
    } else {
      // Without a cache, or with the context full (the cached keys were computed at positions the
      // window has moved past: a learned position table's, or rotations by absolute position):
      // run the window's last `context` ids afresh.
      cache = KvCache();
      next = window();
    }
  }
  network.train(was_training);
  return out;
}

}  // namespace loom::models
