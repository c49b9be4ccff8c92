#include "loom/models/llama.h"

#include <torch/nn/modules/container/modulelist.h>

#include <cmath>

#include "loom/core/error.h"
#include "loom/models/llama_layers.h"

namespace loom::models {
namespace {

class Llama : public ZooNetwork, public CachedDecoder {
 public:
  explicit Llama(const LlamaConfig& c) : config_(c) {
    embed_tokens_ = register_module("embed_tokens", std::make_shared<Embedding>(c.vocab, c.n_embd));
    torch::nn::ModuleList list;  // names the layers "layers.0", "layers.1", ...
    const auto rotary = std::make_shared<Rotary>(c.n_embd / c.n_head, c.rope_theta, c.rope_scaling);
    for (int64_t i = 0; i < c.n_layer; ++i) {
      layers_.push_back(std::make_shared<llama::Block>(c, rotary));
      list->push_back(layers_.back());
    }
    register_module("layers", list);
    norm_ = register_module("norm", std::make_shared<RmsNorm>(c.n_embd, c.norm_eps));
    if (!c.tie_embeddings) {
      lm_head_ = register_module("lm_head", std::make_shared<Linear>(c.n_embd, c.vocab, false));
    }
    initialise();
  }

  std::vector<BlockSpec> block_specs() override {
    std::vector<BlockSpec> blocks;
    blocks.push_back({"embedding",
                      {"embed_tokens"},
                      [this](const at::Tensor& ids) { return embed(ids, 0); },
                      {}});
    for (size_t i = 0; i < layers_.size(); ++i) {
      llama::Block* layer = layers_[i].get();
      const std::string name = "layers." + std::to_string(i);
      blocks.push_back(
          {name, {name}, [layer](const at::Tensor& x) { return layer->forward(x); }, {}});
    }
    if (lm_head_) {
      blocks.push_back(
          {"head", {"norm", "lm_head"}, [this](const at::Tensor& x) { return head(x); }, {}});
    } else {
      blocks.push_back({"head",
                        {"norm"},
                        [this](const at::Tensor& x) { return head(x); },
                        {"embed_tokens.weight"}});
    }
    return blocks;
  }

  // The forward pass of the positions after the cached ones (never split by the sequence).
  at::Tensor forward_cached(const at::Tensor& ids, KvCache& cache) override {
    const WholeSequenceGuard whole;
    cache.layers.resize(layers_.size());
    at::Tensor x = embed(ids, cache.length());
    for (size_t i = 0; i < layers_.size(); ++i) x = layers_[i]->forward(x, &cache.layers[i]);
    return head(x);
  }

  int64_t context() const override { return config_.seq_len; }

  // Tensor parallelism as torchtitan plans a Llama (Megatron-LM's cuts): q, k and v by heads
  // (each rank keeps whole groups of query heads with their key/value head), o_proj by its
  // inputs; gate and up by the hidden width, down by its inputs; the token embedding by the
  // vocabulary where it divides, and an untied head by the vocabulary (the logits then stay
  // split: the loss is computed across the group). The norms stay whole on every rank; where the
  // group splits the sequence too, they and the residual stream run on each rank's positions.
  TensorPlan tensor_plan() const override {
    const LlamaConfig& c = config_;
    TensorPlan plan;
    plan.styles = {
        {"layers.*.self_attn.q_proj", colwise()}, {"layers.*.self_attn.k_proj", colwise()},
        {"layers.*.self_attn.v_proj", colwise()}, {"layers.*.self_attn.o_proj", rowwise()},
        {"layers.*.mlp.gate_proj", colwise()},    {"layers.*.mlp.up_proj", colwise()},
        {"layers.*.mlp.down_proj", rowwise()},    {"embed_tokens", vocabulary()},
        {"layers.*.*_layernorm", sequence()},     {"norm", sequence()}};
    plan.divisors = {
        {c.n_head, "the Llama's " + std::to_string(c.n_head) + " heads (model.llama.n_head)", false,
         "model.llama.n_head"},
        {c.n_kv_head,
         "its " + std::to_string(c.n_kv_head) + " key/value heads (model.llama.n_kv_head)", false,
         "model.llama.n_kv_head"},
        {c.hidden, "its MLP's width of " + std::to_string(c.hidden) + " (model.llama.hidden)",
         false, "model.llama.hidden"},
        {c.seq_len,
         "a context of " + std::to_string(c.seq_len) +
             " positions (data.seq_len) under sequence parallelism",
         true, "data.seq_len"}};
    plan.output = "embed_tokens";
    if (lm_head_) {
      plan.styles.push_back({"lm_head", colwise()});
      plan.divisors.push_back(
          {c.vocab, "its vocabulary of " + std::to_string(c.vocab) + " (the untied lm_head's)",
           false, "data.path"});
      plan.output = "lm_head";
    }
    return plan;
  }

  double training_flops_per_sample() const override {
    return llama_training_flops_per_token(config_) * static_cast<double>(config_.seq_len);
  }
  std::string training_flops_basis() const override { return "6N + 12 L d T per token"; }

 private:
  // The token embeddings of `ids` [B, T], the first at position `first` (by the sequence, this
  // rank's positions' only: [B, T / ranks, C]). Positions enter in the attention's rotations.
  at::Tensor embed(const at::Tensor& ids, int64_t first) {
    const int64_t t = ids.size(1);
    if (first + t > config_.seq_len) {
      throw Error("llama: " + std::to_string(first + t) +
                      " positions, more than the model's context of " +
                      std::to_string(config_.seq_len),
                  {{"problem", "past_context"},
                   {"value", std::to_string(first + t)},
                   {"expected", std::to_string(config_.seq_len)}});
    }
    return embed_tokens_->forward(ids);
  }

  at::Tensor head(const at::Tensor& x) {
    const at::Tensor h = norm_->forward(x);
    return lm_head_ ? lm_head_->forward(h) : embed_tokens_->attend(h);
  }

  void initialise() {
    torch::NoGradGuard no_grad;
    for (auto& p : named_parameters()) {
      if (p.key().find("norm") == std::string::npos) p.value().normal_(0.0, 0.02);
    }
    const double residual = 0.02 / std::sqrt(2.0 * static_cast<double>(config_.n_layer));
    for (auto& layer : layers_) {
      for (at::Tensor w : layer->residual_projections()) w.normal_(0.0, residual);
    }
  }

  LlamaConfig config_;
  std::shared_ptr<Embedding> embed_tokens_;
  std::vector<std::shared_ptr<llama::Block>> layers_;
  std::shared_ptr<RmsNorm> norm_;
  std::shared_ptr<Linear> lm_head_;  // null when tied
};

void require(bool ok, const char* key, const std::string& why) {
  if (!ok) throw ConfigError(std::string("config key '") + key + "': " + why);
}

LlamaConfig llama3(int64_t layers, int64_t heads, int64_t width, int64_t hidden, bool tied,
                   double scaling) {
  LlamaConfig c;
  c.n_layer = layers;
  c.n_head = heads;
  c.n_kv_head = 8;
  c.n_embd = width;
  c.hidden = hidden;
  c.seq_len = 8192;
  c.vocab = 128256;
  c.rope_theta = 500000;
  c.rope_scaling = {scaling, 1, 4, 8192};
  c.tie_embeddings = tied;
  return c;
}

}  // namespace

LlamaConfig llama_preset(const std::string& name) {
  if (name == "llama_tiny") return LlamaConfig{};
  if (name == "llama3.2_1b") return llama3(16, 32, 2048, 8192, true, 32);
  if (name == "llama3.2_3b") return llama3(28, 24, 3072, 8192, true, 32);
  if (name == "llama3.1_8b") return llama3(32, 32, 4096, 14336, false, 8);
  throw ConfigError::at_key(
      "model.llama.preset",
      "unknown Llama preset '" + name + "' (llama_tiny, llama3.2_1b, llama3.2_3b, llama3.1_8b)",
      {{"value", name}});
}

LlamaConfig llama_config(const LlamaModelConfig& model, int64_t vocab, int64_t seq_len) {
  LlamaConfig c = llama_preset(model.preset);
  c.vocab = vocab;
  if (model.n_layer > 0) c.n_layer = model.n_layer;
  if (model.n_head > 0) c.n_head = model.n_head;
  if (model.n_kv_head > 0) c.n_kv_head = model.n_kv_head;
  if (model.n_embd > 0) c.n_embd = model.n_embd;
  if (model.hidden > 0) c.hidden = model.hidden;
  if (model.rope_theta > 0) c.rope_theta = model.rope_theta;
  if (model.embeddings != "preset") c.tie_embeddings = model.embeddings == "tied";
  if (seq_len > 0) c.seq_len = seq_len;
  return c;
}

std::shared_ptr<ZooNetwork> make_llama(const LlamaConfig& c) {
  require(c.n_layer >= 1, "model.llama.n_layer", "at least one layer");
  require(c.n_head >= 1 && c.n_embd >= 1 && c.n_embd % c.n_head == 0, "model.llama.n_embd",
          std::to_string(c.n_embd) + " does not split into " + std::to_string(c.n_head) +
              " heads (model.llama.n_head)");
  require(c.n_kv_head >= 1 && c.n_head % c.n_kv_head == 0, "model.llama.n_kv_head",
          std::to_string(c.n_kv_head) + " key/value heads do not divide the " +
              std::to_string(c.n_head) + " heads (model.llama.n_head)");
  require((c.n_embd / c.n_head) % 2 == 0, "model.llama.n_embd",
          "a head width of " + std::to_string(c.n_embd / c.n_head) +
              ", which rotary positions need even");
  require(c.hidden >= 1, "model.llama.hidden", "at least 1");
  require(c.seq_len >= 1, "data.seq_len", "at least one position");
  require(c.vocab >= 2, "data.path", "a vocabulary of at least two tokens");
  require(c.rope_theta > 0, "model.llama.rope_theta", "above 0");
  return std::make_shared<Llama>(c);
}

int64_t llama_parameter_count(const LlamaConfig& c) {
  const int64_t d = c.n_embd, kv = c.n_kv_head * (d / c.n_head);
  const int64_t layer = 2 * d                 // two RMSNorms
                        + d * d + 2 * d * kv  // q, k, v
                        + d * d               // o
                        + 3 * d * c.hidden;   // gate, up, down
  const int64_t embeddings = (c.tie_embeddings ? 1 : 2) * c.vocab * d;
  return embeddings + c.n_layer * layer + d;
}

double llama_training_flops_per_token(const LlamaConfig& c) {
  // As the GPT's (PaLM's appendix B): the token embedding is a lookup, not a product, unless it
  // is the head too.
  const int64_t lookup = c.tie_embeddings ? 0 : c.vocab * c.n_embd;
  const double n = static_cast<double>(llama_parameter_count(c) - lookup);
  return 6 * n + 12.0 * static_cast<double>(c.n_layer * c.n_embd * c.seq_len);
}

}  // namespace loom::models
