// The Llama family: its forward pass and gradients against a reference written with plain
// LibTorch ops from the model's own tensors (rotations as complex products, each query head
// reading its group's key/value head by index), the rotary frequencies' Llama 3.1 scaling,
// causality, cached decoding, the chain of blocks and the presets' sizes.
#include "loom/models/llama.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "loom/core/error.h"
#include "loom/models/module_model.h"
#include "loom/models/rotary.h"
#include "loom/models/token_cross_entropy_loss.h"
#include "unit/models/small_llama.h"

namespace loom::models {
namespace {

LlamaConfig tiny(bool tied) { return small_llama(tied); }

using Tensors = std::map<std::string, at::Tensor>;

// Head vectors [B, T, hd] of positions 0..T-1 turned: pair i is (x[i], x[i + hd/2]), a complex
// number multiplied by e^(i p w_i).
at::Tensor rotated(const at::Tensor& x, const at::Tensor& frequencies) {
  const int64_t t = x.size(1), half = x.size(2) / 2;
  const at::Tensor pairs = at::complex(x.narrow(2, 0, half), x.narrow(2, half, half));
  const at::Tensor angles = at::outer(at::arange(t, at::kFloat), frequencies);  // [T, hd/2]
  const at::Tensor turns = at::polar(at::ones_like(angles), angles);
  const at::Tensor out = pairs * turns;
  return at::cat({at::real(out), at::imag(out)}, 2);
}

// The Llama's forward, one query head and one position at a time.
at::Tensor reference_forward(const Tensors& p, const LlamaConfig& c, const at::Tensor& ids) {
  const int64_t b = ids.size(0), t = ids.size(1), d = c.n_embd, hd = d / c.n_head;
  const int64_t group = c.n_head / c.n_kv_head;
  const at::Tensor frequencies = rotary_inverse_frequencies(hd, c.rope_theta, c.rope_scaling);
  const auto rms = [&](const at::Tensor& x, const std::string& name) {
    return x / (x.pow(2).mean(-1, true) + c.norm_eps).sqrt() * p.at(name + ".weight");
  };
  const auto dense = [&](const at::Tensor& x, const std::string& name) {
    return at::matmul(x, p.at(name + ".weight").t());
  };
  at::Tensor x = p.at("embed_tokens.weight").index_select(0, ids.reshape({-1})).view({b, t, d});
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const std::string layer = "layers." + std::to_string(l);
    const at::Tensor h = rms(x, layer + ".input_layernorm");
    const at::Tensor q = dense(h, layer + ".self_attn.q_proj");
    const at::Tensor k = dense(h, layer + ".self_attn.k_proj");
    const at::Tensor v = dense(h, layer + ".self_attn.v_proj");
    std::vector<at::Tensor> heads;
    for (int64_t head = 0; head < c.n_head; ++head) {
      const int64_t kv = head / group;  // the key/value head this query head reads
      const at::Tensor qh = rotated(q.narrow(2, head * hd, hd), frequencies);
      const at::Tensor kh = rotated(k.narrow(2, kv * hd, hd), frequencies);
      const at::Tensor vh = v.narrow(2, kv * hd, hd);
      std::vector<at::Tensor> rows;
      for (int64_t i = 0; i < t; ++i) {  // position i sees positions 0..i
        const at::Tensor scores =
            at::matmul(kh.narrow(1, 0, i + 1), qh.select(1, i).unsqueeze(-1)).squeeze(-1) /
            std::sqrt(static_cast<double>(hd));
        rows.push_back((scores.softmax(-1).unsqueeze(-1) * vh.narrow(1, 0, i + 1)).sum(1));
      }
      heads.push_back(at::stack(rows, 1));  // [B, T, hd]
    }
    x = x + dense(at::cat(heads, 2), layer + ".self_attn.o_proj");
    const at::Tensor m = rms(x, layer + ".post_attention_layernorm");
    const at::Tensor gate = dense(m, layer + ".mlp.gate_proj");
    const at::Tensor swish = gate * at::sigmoid(gate);
    x = x + dense(swish * dense(m, layer + ".mlp.up_proj"), layer + ".mlp.down_proj");
  }
  const std::string head = c.tie_embeddings ? "embed_tokens.weight" : "lm_head.weight";
  return at::matmul(rms(x, "norm"), p.at(head).t());
}

TEST(Llama, ForwardAndGradientsMatchAPlainOpsReference) {
  for (const bool tied : {true, false}) {
    SCOPED_TRACE(tied ? "tied" : "untied");
    LlamaConfig c = tiny(tied);
    c.rope_scaling = {8, 1, 4, 16};  // one frequency blended, one divided: checked too
    at::manual_seed(0);
    ModuleModel model("llama", make_llama(c), false);
    Tensors leaves;
    {
      at::NoGradGuard no_grad;
      // The norms start at one: move them, so that the reference checks them too.
      for (const auto& [name, t] : model.named_parameters()) t.add_(at::randn_like(t) * 0.1);
    }
    for (const auto& [name, t] : model.named_parameters()) {
      leaves[name] = t.detach().clone().requires_grad_();
    }
    const at::Tensor ids = at::randint(0, c.vocab, {3, c.seq_len}, at::kLong);
    const at::Tensor logits = model.forward(ids);
    ASSERT_EQ(logits.sizes(), (at::IntArrayRef{3, c.seq_len, c.vocab}));
    const at::Tensor expected = reference_forward(leaves, c, ids);
    EXPECT_LT((logits - expected).abs().max().item<double>(), 1e-5)
        << "largest logit " << expected.abs().max().item<double>();
    const at::Tensor weights = at::randn(logits.sizes());
    (logits * weights).sum().backward();
    (expected * weights).sum().backward();
    for (const auto& [name, t] : model.named_parameters()) {
      const at::Tensor want = leaves.at(name).grad();
      const double scale = std::max(1.0, want.abs().max().item<double>());
      EXPECT_LT((t.grad() - want).abs().max().item<double>(), 1e-4 * scale) << name;
    }
  }
}

TEST(Llama, Llama3ScalingDividesTheSlowFrequenciesAndKeepsTheFast) {
  // Llama 3.1 8B's: head width 128, theta 500,000, factor 8 from 8,192 positions.
  const RopeScaling scaling{8, 1, 4, 8192};
  const at::Tensor plain = rotary_inverse_frequencies(128, 500000, {});
  const at::Tensor scaled = rotary_inverse_frequencies(128, 500000, scaling);
  ASSERT_EQ(scaled.numel(), 64);
  EXPECT_EQ(scaled.scalar_type(), at::kFloat);
  int fast = 0, slow = 0, between = 0;
  for (int64_t i = 0; i < 64; ++i) {
    const double w = plain[i].item<double>(), got = scaled[i].item<double>();
    EXPECT_NEAR(w, std::pow(500000.0, -2.0 * i / 128), 1e-6 * w);
    const double wavelength = 2 * M_PI / w;
    if (wavelength < 8192 / 4.0) {
      EXPECT_EQ(got, w) << i;  // turns many times in the original context: kept
      ++fast;
    } else if (wavelength > 8192 / 1.0) {
      EXPECT_NEAR(got, w / 8, 1e-6 * w) << i;
      ++slow;
    } else {
      const double s = (8192 / wavelength - 1) / (4 - 1);
      EXPECT_NEAR(got, (1 - s) * w / 8 + s * w, 1e-5 * w) << i;
      EXPECT_GT(got, w / 8);
      EXPECT_LT(got, w);
      ++between;
    }
  }
  EXPECT_GT(fast, 0);
  EXPECT_GT(slow, 0);
  EXPECT_GT(between, 0);
}

TEST(Llama, APositionSeesOnlyThePast) {
  at::manual_seed(1);
  ModuleModel model("llama", make_llama(tiny(true)), false);
  at::NoGradGuard no_grad;
  const at::Tensor ids = at::randint(0, 50, {2, 8}, at::kLong);
  at::Tensor changed = ids.clone();
  changed.narrow(1, 5, 3).fill_(7);
  const at::Tensor a = model.forward(ids), b = model.forward(changed);
  EXPECT_TRUE(at::allclose(a.narrow(1, 0, 5), b.narrow(1, 0, 5), 1e-6, 1e-6));
  EXPECT_FALSE(at::allclose(a.narrow(1, 5, 3), b.narrow(1, 5, 3)));
  try {
    model.forward(at::zeros({1, 9}, at::kLong));
    FAIL() << "past the context of 8";
  } catch (const Error& e) {
    EXPECT_EQ(e.field("problem"), "past_context");
    EXPECT_EQ(e.field("expected"), "8");
  }
}

TEST(Llama, CachedDecodingGivesTheFullForwardsLogits) {
  for (const bool tied : {true, false}) {
    at::manual_seed(4);
    const LlamaConfig c = tiny(tied);
    auto net = make_llama(c);
    ModuleModel model("llama", net, false);
    at::NoGradGuard no_grad;
    const at::Tensor ids = at::randint(0, c.vocab, {2, 8}, at::kLong);
    const at::Tensor full = model.forward(ids);
    KvCache cache;
    // A prompt of three, two more at once (queries after cached keys), then one at a time.
    const at::Tensor first = forward_cached(*net, ids.narrow(1, 0, 3), cache);
    EXPECT_LT((first - full.narrow(1, 0, 3)).abs().max().item<double>(), 1e-5);
    const at::Tensor two = forward_cached(*net, ids.narrow(1, 3, 2), cache);
    EXPECT_LT((two - full.narrow(1, 3, 2)).abs().max().item<double>(), 1e-5);
    for (int64_t p = 5; p < 8; ++p) {
      const at::Tensor step = forward_cached(*net, ids.narrow(1, p, 1), cache);
      EXPECT_LT((step - full.narrow(1, p, 1)).abs().max().item<double>(), 1e-5) << p;
    }
    EXPECT_EQ(cache.length(), 8);
    EXPECT_THROW(forward_cached(*net, ids.narrow(1, 0, 1), cache), Error);  // past 8
    // Generation slides its window past the context, and is a pure function of the seed.
    Sampling s;
    s.seed = 3;
    const std::vector<int64_t> drawn = generate(*net, {1, 2, 3}, 12, s);
    EXPECT_EQ(drawn.size(), 12u);
    EXPECT_EQ(generate(*net, {1, 2, 3}, 12, s), drawn);
    // Greedy, the cache draws what running the whole window again for every token draws.
    s.temperature = 0;
    const std::vector<int64_t> cached = generate(*net, {1, 2, 3}, 12, s);
    s.use_cache = false;
    EXPECT_EQ(generate(*net, {1, 2, 3}, 12, s), cached);
  }
}

TEST(Llama, TheBlocksAreTheModelAndAnUntiedHeadIsItsOwn) {
  for (const bool tied : {true, false}) {
    SCOPED_TRACE(tied ? "tied" : "untied");
    at::manual_seed(2);
    const LlamaConfig c = tiny(tied);
    ModuleModel model("llama", make_llama(c), false);
    EXPECT_EQ(model.parameter_count(), llama_parameter_count(c));
    bool head = false;
    for (const auto& [name, p] : model.named_parameters()) head = head || name == "lm_head.weight";
    EXPECT_EQ(head, !tied);
    std::vector<std::string> names;
    for (const Block& b : model.blocks()) names.push_back(b.name);
    EXPECT_EQ(names, (std::vector<std::string>{"embedding", "layers.0", "layers.1", "head"}));
    check_blocks(model, at::randint(0, c.vocab, {2, 6}, at::kLong));
    // Every parameter learns from a step's loss.
    TokenCrossEntropyLoss loss;
    const at::Tensor ids = at::randint(0, c.vocab, {2, 8}, at::kLong);
    loss(model.forward(ids), ids.roll(-1, 1)).backward();
    for (const auto& [name, p] : model.named_parameters()) {
      ASSERT_TRUE(p.grad().defined()) << name;
      EXPECT_GT(p.grad().abs().sum().item<double>(), 0) << name;
    }
  }
}

TEST(Llama, PresetsHaveThePublishedSizesAndShapesThatCannotBeAreNamed) {
  // Hugging Face's parameter counts of the released models.
  EXPECT_EQ(llama_parameter_count(llama_preset("llama3.2_1b")), 1235814400);
  EXPECT_EQ(llama_parameter_count(llama_preset("llama3.2_3b")), 3212749824);
  EXPECT_EQ(llama_parameter_count(llama_preset("llama3.1_8b")), 8030261248);
  EXPECT_FALSE(llama_preset("llama3.1_8b").tie_embeddings);
  EXPECT_EQ(llama_preset("llama_tiny").n_embd, 128);
  try {
    llama_preset("llama5");
    FAIL() << "no such preset";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.key(), "model.llama.preset");
  }
  LlamaModelConfig configured;
  configured.n_kv_head = 4;
  configured.embeddings = "untied";
  const LlamaConfig c = llama_config(configured, 300, 32);
  EXPECT_EQ(c.n_kv_head, 4);
  EXPECT_FALSE(c.tie_embeddings);
  EXPECT_EQ(c.vocab, 300);
  EXPECT_EQ(c.seq_len, 32);
  LlamaConfig odd = tiny(true);
  odd.n_kv_head = 3;  // 4 query heads do not share 3 key/value heads
  try {
    make_llama(odd);
    FAIL() << "4 heads over 3 key/value heads";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.key(), "model.llama.n_kv_head");
  }
}

}  // namespace
}  // namespace loom::models
