#include "loom/models/gpt.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <cmath>
#include <limits>
#include <map>
#include <utility>

#include "loom/core/error.h"
#include "loom/models/causal_attention.h"
#include "loom/models/linear.h"

namespace loom::models {
namespace {

// How tensor parallelism cuts a layer's weights (Megatron's): the products into a split part
// by their output columns (rows of the weight, with their biases), the products out of it by
// their input columns; their biases stay whole and are added after the sum.
const TensorSplit kQueryKeyValue{0, 3};  // c_attn: q, k and v, each by heads

// The mask every layer's attention adds to its scores: [n, n], 0 where a query may see a key,
// -inf after it. One per model and dtype (fp32, and bf16 under autocast), made at the model's
// context on first use and kept (not a buffer: nothing to train or save). A forward takes a view
// of its first n positions, so it neither builds nor converts a mask; a longer one (which the
// embedding refuses) would rebuild them.
class CausalMask {
 public:
  explicit CausalMask(int64_t context) : length_(context) {}

  at::Tensor first(int64_t n, at::ScalarType dtype) {
    if (n > length_) {
      masks_.clear();
      length_ = n;
    }
    at::Tensor& mask = masks_[dtype];
    if (!mask.defined()) {
      mask =
          at::full({length_, length_}, -std::numeric_limits<float>::infinity()).triu(1).to(dtype);
    }
    return mask.narrow(0, 0, n).narrow(1, 0, n);
  }

 private:
  int64_t length_;
  std::map<at::ScalarType, at::Tensor> masks_;
};

// Causal self-attention: every position attends to itself and the positions before it.
class CausalSelfAttention : public torch::nn::Module {
 public:
  CausalSelfAttention(const GptConfig& c, std::shared_ptr<CausalMask> mask)
      : heads_(c.n_head), width_(c.n_embd), mask_(std::move(mask)) {
    c_attn_ = register_module("c_attn", torch::nn::Linear(c.n_embd, 3 * c.n_embd));
    c_proj_ = register_module("c_proj", torch::nn::Linear(c.n_embd, c.n_embd));
    attn_dropout_ = register_module("attn_dropout", torch::nn::Dropout(c.dropout));
    resid_dropout_ = register_module("resid_dropout", torch::nn::Dropout(c.dropout));
  }

  // Tensor parallelism: this rank keeps the query, key and value columns of its heads and the
  // matching input columns of the output projection.
  void split(TensorGroup& group) {
    keep_slice(c_attn_->weight, kQueryKeyValue, group);
    keep_slice(c_attn_->bias, kQueryKeyValue, group);
    keep_slice(c_proj_->weight, kByInputs, group);
    heads_ /= group.size();
    width_ /= group.size();
    group_ = &group;
  }

  // With a cache, `x` holds the positions after the cached ones: they attend to those too, and
  // their keys and values join the cache.
  at::Tensor forward(const at::Tensor& x, KvCache::Layer* cache = nullptr) {
    const int64_t b = x.size(0), t = x.size(1), head = width_ / heads_;
    // [B, T, 3C] -> q, k, v as [B, heads, T, head] (this rank's heads under tensor parallelism)
    const auto qkv = linear(c_attn_, group_ ? enter_split(x, *group_) : x).split(width_, 2);
    const auto per_head = [&](const at::Tensor& y) {
      return y.view({b, t, heads_, head}).transpose(1, 2);
    };
    at::Tensor q = per_head(qkv[0]), k = per_head(qkv[1]), v = per_head(qkv[2]);
    int64_t past = 0;
    if (cache) {
      if (cache->keys.defined()) {
        past = cache->keys.size(2);
        k = at::cat({cache->keys, k}, 2);
        v = at::cat({cache->values, v}, 2);
      }
      cache->keys = k;
      cache->values = v;
    }
    // New position i is position past + i: it sees keys 0 .. past + i.
    const int64_t keys = past + t;
    const at::Tensor y =
        causal_attention(q.reshape({b * heads_, t, head}), k.reshape({b * heads_, keys, head}),
                         v.reshape({b * heads_, keys, head}), mask_->first(keys, q.scalar_type()),
                         past, causal_query_blocks(t),
                         [this, b](const at::Tensor& w) { return weights_dropout(w, b); })
            .view({b, heads_, t, head})
            .transpose(1, 2)
            .contiguous()
            .view({b, t, width_});
    if (!group_) return resid_dropout_->forward(linear(c_proj_, y));
    // Each rank's heads' share of the projection, summed: replicated again.
    return resid_dropout_->forward(leave_split(at::linear(y, c_proj_->weight), *group_) +
                                   c_proj_->bias);
  }

  torch::nn::Linear c_proj_{nullptr};

 private:
  // Dropout of attention weights [B x heads, rows, keys]. Split by heads, each rank draws the
  // mask of every head, as one process does, and keeps its own heads': the same masks, and the
  // ranks' generators stay in step for the replicated dropouts after.
  at::Tensor weights_dropout(const at::Tensor& w, int64_t b) {
    const auto& options = attn_dropout_->options;
    if (!group_ || !attn_dropout_->is_training() || options.p() == 0) {
      return attn_dropout_->forward(w);
    }
    const int64_t all_heads = heads_ * group_->size();
    const at::Tensor mask = attn_dropout_->forward(
        at::ones({b, all_heads, w.size(1), w.size(2)}, w.options().requires_grad(false)));
    return w * mask.narrow(1, group_->rank() * heads_, heads_).reshape(w.sizes());
  }

  int64_t heads_, width_;             // this rank's
  TensorGroup* group_ = nullptr;      // tensor parallelism's, once split
  std::shared_ptr<CausalMask> mask_;  // the model's, shared by its layers
  torch::nn::Linear c_attn_{nullptr};
  torch::nn::Dropout attn_dropout_{nullptr}, resid_dropout_{nullptr};
};

class Mlp : public torch::nn::Module {
 public:
  explicit Mlp(const GptConfig& c) {
    c_fc_ = register_module("c_fc", torch::nn::Linear(c.n_embd, 4 * c.n_embd));
    c_proj_ = register_module("c_proj", torch::nn::Linear(4 * c.n_embd, c.n_embd));
    dropout_ = register_module("dropout", torch::nn::Dropout(c.dropout));
  }
  // Tensor parallelism: this rank keeps its share of the hidden width.
  void split(TensorGroup& group) {
    keep_slice(c_fc_->weight, kByOutputs, group);
    keep_slice(c_fc_->bias, kByOutputs, group);
    keep_slice(c_proj_->weight, kByInputs, group);
    group_ = &group;
  }
  at::Tensor forward(const at::Tensor& x) {
    if (!group_) return dropout_->forward(linear(c_proj_, at::gelu(linear(c_fc_, x))));
    const at::Tensor hidden = at::gelu(linear(c_fc_, enter_split(x, *group_)));
    return dropout_->forward(leave_split(at::linear(hidden, c_proj_->weight), *group_) +
                             c_proj_->bias);
  }

  torch::nn::Linear c_proj_{nullptr};

 private:
  TensorGroup* group_ = nullptr;
  torch::nn::Linear c_fc_{nullptr};
  torch::nn::Dropout dropout_{nullptr};
};

class GptBlock : public torch::nn::Module {
 public:
  GptBlock(const GptConfig& c, std::shared_ptr<CausalMask> mask) {
    ln_1_ = register_module("ln_1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.n_embd})));
    attn_ = register_module("attn", std::make_shared<CausalSelfAttention>(c, std::move(mask)));
    ln_2_ = register_module("ln_2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.n_embd})));
    mlp_ = register_module("mlp", std::make_shared<Mlp>(c));
  }
  at::Tensor forward(const at::Tensor& x, KvCache::Layer* cache = nullptr) {
    const at::Tensor h = x + attn_->forward(ln_1_->forward(x), cache);
    return h + mlp_->forward(ln_2_->forward(h));
  }
  void split(TensorGroup& group) {
    attn_->split(group);
    mlp_->split(group);
  }
  // The projections back into the residual stream (GPT-2 scales their initial weights).
  std::vector<at::Tensor> residual_projections() {
    return {attn_->c_proj_->weight, mlp_->c_proj_->weight};
  }

 private:
  torch::nn::LayerNorm ln_1_{nullptr}, ln_2_{nullptr};
  std::shared_ptr<CausalSelfAttention> attn_;
  std::shared_ptr<Mlp> mlp_;
};

class Gpt : public ZooNetwork {
 public:
  explicit Gpt(const GptConfig& c) : config_(c), seq_len_(c.seq_len) {
    wte_ = register_module("wte", torch::nn::Embedding(c.vocab, c.n_embd));
    wpe_ = register_module("wpe", torch::nn::Embedding(c.seq_len, c.n_embd));
    drop_ = register_module("drop", torch::nn::Dropout(c.dropout));
    torch::nn::ModuleList list;  // names the layers "h.0", "h.1", ... as GPT-2 does
    const auto mask = std::make_shared<CausalMask>(c.seq_len);
    for (int64_t i = 0; i < c.n_layer; ++i) {
      layers_.push_back(std::make_shared<GptBlock>(c, mask));
      list->push_back(layers_.back());
    }
    register_module("h", list);
    ln_f_ = register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.n_embd})));
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

  // The forward pass of the positions after the cached ones.
  at::Tensor forward_cached(const at::Tensor& ids, KvCache& cache) {
    cache.layers.resize(layers_.size());
    at::Tensor x = embed(ids, cache.length());
    for (size_t i = 0; i < layers_.size(); ++i) x = layers_[i]->forward(x, &cache.layers[i]);
    return head(x);
  }

  int64_t seq_len() const { return seq_len_; }

  // Tensor parallelism over the layers: attention by heads, the MLP by its hidden width; and
  // the token embedding with its tied head by the vocabulary where it divides (the logits then
  // stay split: the loss is computed across the group). The position table and the LayerNorms
  // stay whole on every rank.
  bool split_for_tensor_parallel(TensorGroup& group) override {
    const int64_t t = group.size();
    if (config_.n_head % t != 0) {
      throw ConfigError("config key 'parallel.tensor': " + std::to_string(t) +
                        " ranks do not split the GPT's " + std::to_string(config_.n_head) +
                        " heads (model.gpt.n_head)");
    }
    for (auto& layer : layers_) layer->split(group);
    if (config_.vocab % t == 0) {
      keep_slice(wte_->weight, kByOutputs, group);
      vocab_group_ = &group;
    }
    split_ = true;
    return true;
  }
  bool output_split() const override { return vocab_group_ != nullptr; }
  TensorSplits tensor_splits() const override {
    TensorSplits splits;
    if (!split_) return splits;
    for (size_t i = 0; i < layers_.size(); ++i) {
      const std::string h = "h." + std::to_string(i) + ".";
      splits[h + "attn.c_attn.weight"] = kQueryKeyValue;
      splits[h + "attn.c_attn.bias"] = kQueryKeyValue;
      splits[h + "attn.c_proj.weight"] = kByInputs;
      splits[h + "mlp.c_fc.weight"] = kByOutputs;
      splits[h + "mlp.c_fc.bias"] = kByOutputs;
      splits[h + "mlp.c_proj.weight"] = kByInputs;
    }
    if (vocab_group_) splits["wte.weight"] = kByOutputs;
    return splits;
  }

  double training_flops_per_sample() const override {
    return gpt_training_flops_per_token(config_) * static_cast<double>(seq_len_);
  }

 private:
  // Token and position embeddings of `ids`, the first at position `first`.
  at::Tensor embed(const at::Tensor& ids, int64_t first) {
    const int64_t t = ids.size(1);
    if (first + t > seq_len_) {
      throw Error("gpt: " + std::to_string(first + t) +
                  " positions, more than the model's context of " + std::to_string(seq_len_));
    }
    const at::Tensor positions = at::arange(first, first + t, ids.options());
    return drop_->forward(tokens(ids) + wpe_->forward(positions));
  }

  // The token embeddings; split by the vocabulary, each rank looks up the ids in its share
  // (zeros for the others) and the sum over the group is every id's row.
  at::Tensor tokens(const at::Tensor& ids) {
    if (!vocab_group_) return wte_->forward(ids);
    const int64_t share = wte_->weight.size(0);
    const at::Tensor local = ids - vocab_group_->rank() * share;
    const at::Tensor mine = local.ge(0).logical_and(local.lt(share));
    const at::Tensor rows = at::embedding(wte_->weight, local.clamp(0, share - 1)) *
                            mine.unsqueeze(-1).to(wte_->weight.scalar_type());
    return leave_split(rows, *vocab_group_);
  }

  at::Tensor head(const at::Tensor& x) {
    // Tied to the token embedding; split by the vocabulary, this rank's share of the logits.
    if (vocab_group_)
      return at::linear(enter_split(ln_f_->forward(x), *vocab_group_), wte_->weight);
    return at::linear(ln_f_->forward(x), wte_->weight);
  }

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
  bool split_ = false;                  // over a tensor group
  TensorGroup* vocab_group_ = nullptr;  // the token embedding's, where the vocabulary divides
  torch::nn::Embedding wte_{nullptr}, wpe_{nullptr};
  torch::nn::Dropout drop_{nullptr};
  std::vector<std::shared_ptr<GptBlock>> layers_;
  torch::nn::LayerNorm ln_f_{nullptr};
};

void require(bool ok, const char* key, const std::string& why) {
  if (!ok) throw ConfigError(std::string("config key '") + key + "': " + why);
}

}  // namespace

GptConfig gpt_preset(const std::string& name, int64_t vocab) {
  if (name == "gpt2") return {12, 12, 768, 1024, 50257, 0.0};
  if (name == "gpt_mini") return {6, 6, 384, 256, vocab, 0.2};
  if (name == "gpt_tiny") return {4, 4, 128, 64, vocab, 0.0};
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

at::Tensor gpt_forward_cached(ZooNetwork& gpt, const at::Tensor& ids, KvCache& cache) {
  auto* model = dynamic_cast<Gpt*>(&gpt);
  if (!model) throw Error("gpt: cached decoding needs a model made by make_gpt");
  return model->forward_cached(ids, cache);
}

std::vector<int64_t> gpt_generate(ZooNetwork& gpt, const std::vector<int64_t>& prompt,
                                  int64_t tokens, const Sampling& sampling) {
  auto* model = dynamic_cast<Gpt*>(&gpt);
  if (!model) throw Error("gpt: generation needs a model made by make_gpt");
  if (prompt.empty()) throw ConfigError("--prompt: generation starts from at least one token");
  const auto length = static_cast<int64_t>(prompt.size());
  if (tokens < 0 || length + tokens > model->seq_len()) {
    throw ConfigError("--tokens: " + std::to_string(length) + " prompt tokens and " +
                      std::to_string(tokens) + " more exceed the model's context of " +
                      std::to_string(model->seq_len()));
  }
  const bool was_training = model->is_training();
  model->eval();
  at::NoGradGuard no_grad;
  at::Generator draws = at::make_generator<at::CPUGeneratorImpl>(sampling.seed);
  KvCache cache;
  std::vector<int64_t> out;
  at::Tensor next = at::tensor(prompt, at::kLong).unsqueeze(0);
  for (int64_t i = 0; i < tokens; ++i) {
    at::Tensor logits = model->forward_cached(next, cache).select(1, -1).squeeze(0).to(at::kFloat);
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
    next = at::full({1, 1}, id, at::kLong);
  }
  model->train(was_training);
  return out;
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

int64_t gpt_tensor_split_parameter_count(const GptConfig& c, int64_t ranks) {
  const int64_t d = c.n_embd;
  const int64_t embedding = c.vocab % ranks == 0 ? c.vocab * d : 0;  // by the vocabulary
  const int64_t layer = d * 3 * d + 3 * d                            // c_attn, by heads
                        + d * d              // attention's c_proj weight, by its inputs
                        + d * 4 * d + 4 * d  // c_fc, by its outputs
                        + 4 * d * d;         // mlp's c_proj weight, by its inputs
  return c.n_layer * layer + embedding;
}

double gpt_training_flops_per_token(const GptConfig& c) {
  // PaLM's appendix B (as nanoGPT's estimate_mfu): 6 FLOPs per parameter per token for the
  // matrix products forward and backward, plus attention's QK^T and AV, 12 L d T. The position
  // table is a lookup, not a product: it is left out of N.
  const double n = static_cast<double>(gpt_parameter_count(c) - c.seq_len * c.n_embd);
  return 6 * n + 12.0 * static_cast<double>(c.n_layer * c.n_embd * c.seq_len);
}

}  // namespace loom::models
