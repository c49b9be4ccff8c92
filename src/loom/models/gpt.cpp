#include "loom/models/gpt.h"

#include <torch/nn/modules/container/modulelist.h>

#include <cmath>

#include "loom/core/error.h"
#include "loom/models/gpt_layers.h"

namespace loom::models {
namespace {

using gpt::CausalMask;
using gpt::GptBlock;

class Gpt : public ZooNetwork, public CachedDecoder {
 public:
  explicit Gpt(const GptConfig& c) : config_(c), seq_len_(c.seq_len) {
    wte_ = register_module("wte", std::make_shared<Embedding>(c.vocab, c.n_embd));
    wpe_ = register_module("wpe", std::make_shared<Embedding>(c.seq_len, c.n_embd));
    drop_ = register_module("drop", std::make_shared<Dropout>(c.dropout));
    torch::nn::ModuleList list;  // names the layers "h.0", "h.1", ... as GPT-2 does
    const auto mask = std::make_shared<CausalMask>(c.seq_len);
    for (int64_t i = 0; i < c.n_layer; ++i) {
      layers_.push_back(std::make_shared<GptBlock>(c, mask));
      list->push_back(layers_.back());
    }
    register_module("h", list);
    ln_f_ = register_module("ln_f", std::make_shared<LayerNorm>(c.n_embd));
    initialise(c);
  }

  std::vector<BlockSpec> block_specs() override {
    std::vector<BlockSpec> blocks;
    blocks.push_back(
        {"embedding", {"wte", "wpe"}, [this](const at::Tensor& ids) { return embed(ids, 0); }, {}});
    for (size_t i = 0; i < layers_.size(); ++i) {
      GptBlock* layer = layers_[i].get();
      const std::string name = "h." + std::to_string(i);
      blocks.push_back(
          {name, {name}, [layer](const at::Tensor& x) { return layer->forward(x); }, {}});
    }
    blocks.push_back(
        {"head", {"ln_f"}, [this](const at::Tensor& x) { return head(x); }, {"wte.weight"}});
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

  int64_t context() const override { return seq_len_; }

  // Tensor parallelism (Megatron-LM's, as torchtitan plans a transformer): attention by heads,
  // the MLP by its hidden width; the token embedding, with its tied head, by the vocabulary where
  // it divides (the logits then stay split: the loss is computed across the group). The position
  // table and the LayerNorms stay whole on every rank; where the group splits the sequence too,
  // they, the dropouts and the residual stream run on each rank's positions.
  TensorPlan tensor_plan() const override {
    TensorPlan plan;
    plan.styles = {{"h.*.attn.c_attn", colwise(3)},  // q, k and v, each by heads
                   {"h.*.attn.c_proj", rowwise()},
                   {"h.*.mlp.c_fc", colwise()},
                   {"h.*.mlp.c_proj", rowwise()},
                   {"wte", vocabulary()},
                   {"wpe", sequence()},
                   {"drop", sequence()},
                   {"h.*.ln_*", sequence()},
                   {"h.*.attn.resid_dropout", sequence()},
                   {"h.*.mlp.dropout", sequence()},
                   {"ln_f", sequence()}};
    plan.divisors = {{config_.n_head,
                      "the GPT's " + std::to_string(config_.n_head) + " heads (model.gpt.n_head)",
                      false, "model.gpt.n_head"},
                     {config_.seq_len,
                      "a context of " + std::to_string(config_.seq_len) +
                          " positions (data.seq_len) under sequence parallelism",
                      true, "data.seq_len"}};
    plan.output = "wte";
    return plan;
  }

  double training_flops_per_sample() const override {
    return gpt_training_flops_per_token(config_) * static_cast<double>(seq_len_);
  }
  std::string training_flops_basis() const override { return "6N + 12 L d T per token"; }

 private:
  // Token and position embeddings of `ids` [B, T], the first at position `first` (by the
  // sequence, this rank's positions' only: [B, T / ranks, C]).
  at::Tensor embed(const at::Tensor& ids, int64_t first) {
    const int64_t t = ids.size(1);
    if (first + t > seq_len_) {
      throw Error("gpt: " + std::to_string(first + t) +
                  " positions, more than the model's context of " + std::to_string(seq_len_));
    }
    const at::Tensor positions = at::arange(first, first + t, ids.options()).unsqueeze(0);
    return drop_->forward(wte_->forward(ids) + wpe_->forward(positions));
  }

  // The logits of `x` [B, T, C], tied to the token embedding.
  at::Tensor head(const at::Tensor& x) { return wte_->attend(ln_f_->forward(x)); }

  void initialise(const GptConfig& c) {
    torch::NoGradGuard no_grad;
    for (auto& p : named_parameters()) {
      const std::string& name = p.key();
      const bool bias = name.size() >= 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
      const bool norm = name.find("ln_") != std::string::npos;
      if (bias) {
        p.value().zero_();
      } else if (!norm) {
        p.value().normal_(0.0, 0.02);
      }
    }
    const double residual = 0.02 / std::sqrt(2.0 * static_cast<double>(c.n_layer));
    for (auto& layer : layers_) {
      for (at::Tensor w : layer->residual_projections()) w.normal_(0.0, residual);
    }
  }

  GptConfig config_;
  int64_t seq_len_;
  std::shared_ptr<Embedding> wte_, wpe_;
  std::shared_ptr<Dropout> drop_;
  std::vector<std::shared_ptr<GptBlock>> layers_;
  std::shared_ptr<LayerNorm> ln_f_;
};

void require(bool ok, const char* key, const std::string& why) {
  if (!ok) throw ConfigError(std::string("config key '") + key + "': " + why);
}

}  // namespace

GptConfig gpt_preset(const std::string& name, int64_t vocab) {
  if (name == "gpt2") return {12, 12, 768, 1024, 50257, 0.0, false};
  if (name == "gpt_mini") return {6, 6, 384, 256, vocab, 0.2, false};
  if (name == "gpt_tiny") return {4, 4, 128, 64, vocab, 0.0, false};
  throw ConfigError("config key 'model.gpt.preset': unknown GPT preset '" + name +
                    "' (gpt2, gpt_mini, gpt_tiny)");
}

GptConfig gpt_config(const GptModelConfig& model, int64_t vocab, int64_t seq_len) {
  GptConfig c = gpt_preset(model.preset, vocab);
  c.vocab = vocab;
  if (model.n_layer > 0) c.n_layer = model.n_layer;
  if (model.n_head > 0) c.n_head = model.n_head;
  if (model.n_embd > 0) c.n_embd = model.n_embd;
  if (seq_len > 0) c.seq_len = seq_len;
  c.dropout = model.dropout;
  return c;
}

std::shared_ptr<ZooNetwork> make_gpt(const GptConfig& c) {
  require(c.n_layer >= 1, "model.gpt.n_layer", "at least one layer");
  require(c.n_head >= 1 && c.n_embd >= 1 && c.n_embd % c.n_head == 0, "model.gpt.n_embd",
          std::to_string(c.n_embd) + " does not split into " + std::to_string(c.n_head) +
              " heads (model.gpt.n_head)");
  require(c.seq_len >= 1, "data.seq_len", "at least one position");
  require(c.vocab >= 2, "data.path", "a vocabulary of at least two tokens");
  require(c.dropout >= 0 && c.dropout < 1, "model.gpt.dropout", "in [0, 1)");
  return std::make_shared<Gpt>(c);
}

int64_t gpt_parameter_count(const GptConfig& c) {
  const int64_t d = c.n_embd;
  const int64_t layer = 2 * 2 * d            // two LayerNorms
                        + d * 3 * d + 3 * d  // c_attn
                        + d * d + d          // attention's c_proj
                        + d * 4 * d + 4 * d  // c_fc
                        + 4 * d * d + d;     // mlp's c_proj
  return c.vocab * d + c.seq_len * d + c.n_layer * layer + 2 * d;
}

double gpt_training_flops_per_token(const GptConfig& c) {
  // PaLM's appendix B (as nanoGPT's estimate_mfu): 6 FLOPs per parameter per token for the
  // matrix products forward and backward, plus attention's QK^T and AV, 12 L d T. The position
  // table is a lookup, not a product: it is left out of N.
  const double n = static_cast<double>(gpt_parameter_count(c) - c.seq_len * c.n_embd);
  return 6 * n + 12.0 * static_cast<double>(c.n_layer * c.n_embd * c.seq_len);
}

}  // namespace loom::models
