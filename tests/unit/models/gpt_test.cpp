// The GPT-2 family: its forward pass against a reference written with plain LibTorch ops from
// the model's own tensors, causality, the tied head, the chain of blocks, the presets' sizes.
#include "loom/models/gpt.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "loom/core/autocast_scope.h"
#include "loom/core/error.h"
#include "loom/models/causal_attention.h"
#include "loom/models/module_model.h"
#include "loom/models/token_cross_entropy_loss.h"

namespace loom::models {
namespace {

GptConfig tiny() { return {2, 2, 16, 8, 50, 0.0, false}; }

// GPT-2's forward, one head and one position at a time, from the tensors by name.
at::Tensor reference_forward(const std::map<std::string, at::Tensor>& p, const GptConfig& c,
                             const at::Tensor& ids) {
  const int64_t b = ids.size(0), t = ids.size(1), d = c.n_embd, hs = d / c.n_head;
  const auto ln = [&](const at::Tensor& x, const std::string& name) {
    const at::Tensor mean = x.mean(-1, true);
    const at::Tensor var = (x - mean).pow(2).mean(-1, true);
    return (x - mean) / (var + 1e-5).sqrt() * p.at(name + ".weight") + p.at(name + ".bias");
  };
  const auto dense = [&](const at::Tensor& x, const std::string& name) {
    return at::matmul(x, p.at(name + ".weight").t()) + p.at(name + ".bias");
  };
  at::Tensor x = p.at("wte.weight").index_select(0, ids.reshape({-1})).view({b, t, d}) +
                 p.at("wpe.weight").narrow(0, 0, t);
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const std::string h = "h." + std::to_string(l);
    const at::Tensor qkv = dense(ln(x, h + ".ln_1"), h + ".attn.c_attn");
    at::Tensor y = at::zeros({b, t, d});
    for (int64_t head = 0; head < c.n_head; ++head) {
      const at::Tensor q = qkv.narrow(2, head * hs, hs), k = qkv.narrow(2, d + head * hs, hs),
                       v = qkv.narrow(2, 2 * d + head * hs, hs);
      for (int64_t i = 0; i < t; ++i) {  // position i sees positions 0..i
        const at::Tensor scores =
            at::matmul(k.narrow(1, 0, i + 1), q.select(1, i).unsqueeze(-1)).squeeze(-1) /
            std::sqrt(static_cast<double>(hs));
        const at::Tensor w = scores.softmax(-1);                                  // [B, i+1]
        const at::Tensor out = (w.unsqueeze(-1) * v.narrow(1, 0, i + 1)).sum(1);  // [B, hs]
        y.select(1, i).narrow(1, head * hs, hs).copy_(out);
      }
    }
    x = x + dense(y, h + ".attn.c_proj");
    const at::Tensor m = dense(ln(x, h + ".ln_2"), h + ".mlp.c_fc");
    const at::Tensor gelu = 0.5 * m * (1 + at::erf(m / std::sqrt(2.0)));
    x = x + dense(gelu, h + ".mlp.c_proj");
  }
  return at::matmul(ln(x, "ln_f"), p.at("wte.weight").t());
}

void expect_forward_matches_reference(const GptConfig& c);

TEST(Gpt, ForwardMatchesAPlainOpsReference) {
  // A context of 8 attends in one block; one of 520 in 4 blocks of query rows.
  for (const GptConfig& c : {tiny(), GptConfig{2, 2, 16, 520, 50, 0.0, false}}) {
    SCOPED_TRACE("context " + std::to_string(c.seq_len));
    expect_forward_matches_reference(c);
  }
}

void expect_forward_matches_reference(const GptConfig& c) {
  at::manual_seed(0);
  ModuleModel model("gpt", make_gpt(c), false);
  std::map<std::string, at::Tensor> tensors;
  for (const auto& [name, t] : model.named_parameters()) tensors[name] = t.detach();
  // Biases and norms start at zero and one: move them, so that the reference checks them too.
  for (auto& [name, t] : tensors) t.add_(at::randn_like(t) * 0.1);
  const at::Tensor ids = at::randint(0, c.vocab, {3, c.seq_len}, at::kLong);
  at::NoGradGuard no_grad;
  const at::Tensor logits = model.forward(ids);
  ASSERT_EQ(logits.sizes(), (at::IntArrayRef{3, c.seq_len, c.vocab}));
  const at::Tensor expected = reference_forward(tensors, c, ids);
  EXPECT_LT((logits - expected).abs().max().item<double>(), 1e-5)
      << "largest logit " << expected.abs().max().item<double>();
  // A shorter sequence takes the first positions.
  EXPECT_TRUE(at::allclose(model.forward(ids.narrow(1, 0, 5)), logits.narrow(1, 0, 5), 1e-5, 1e-5));
}

// Without dropout the layers' attention is torch's fused kernel (scaled_dot_product_attention):
// its gradients are the plain-ops reference's, at a context of one block and of three.
TEST(Gpt, GradientsMatchThePlainOpsReference) {
  for (const GptConfig& c : {tiny(), GptConfig{2, 2, 16, 300, 50, 0.0, false}}) {
    SCOPED_TRACE("context " + std::to_string(c.seq_len));
    at::manual_seed(7);
    ModuleModel model("gpt", make_gpt(c), false);
    std::map<std::string, at::Tensor> leaves;
    for (const auto& [name, t] : model.named_parameters()) {
      leaves[name] = t.detach().clone().requires_grad_();
    }
    const at::Tensor ids = at::randint(0, c.vocab, {2, c.seq_len}, at::kLong);
    const at::Tensor weights = at::randn({2, c.seq_len, c.vocab});
    (model.forward(ids) * weights).sum().backward();
    (reference_forward(leaves, c, ids) * weights).sum().backward();
    for (const auto& [name, t] : model.named_parameters()) {
      const at::Tensor expected = leaves.at(name).grad();
      const double scale = std::max(1.0, expected.abs().max().item<double>());
      EXPECT_LT((t.grad() - expected).abs().max().item<double>(), 1e-4 * scale) << name;
    }
  }
}

// Query rows in blocks give the one-block result and gradients, with and without cached keys
// before the queries (in double, so that only the softmax's order of sums differs).
TEST(CausalAttention, BlocksGiveTheWholeProductAndItsGradients) {
  at::manual_seed(3);
  const auto opts = at::TensorOptions().dtype(at::kDouble);
  const auto none = [](const at::Tensor& w) { return w; };
  for (int64_t past : {0, 37}) {
    const int64_t t = 203, keys = past + t;
    const at::Tensor bias =
        at::full({keys, keys}, -std::numeric_limits<double>::infinity(), opts).triu(1);
    const at::Tensor q0 = at::randn({6, t, 8}, opts), k0 = at::randn({6, keys, 8}, opts),
                     v0 = at::randn({6, keys, 8}, opts), grad = at::randn({6, t, 8}, opts);
    std::vector<at::Tensor> whole;
    for (int64_t blocks : {1, 2, 3, 4}) {
      SCOPED_TRACE("past " + std::to_string(past) + ", blocks " + std::to_string(blocks));
      const at::Tensor q = q0.clone().requires_grad_(), k = k0.clone().requires_grad_(),
                       v = v0.clone().requires_grad_();
      const at::Tensor y = causal_attention(q, k, v, bias, past, blocks, none);
      y.backward(grad);
      const std::vector<at::Tensor> got = {y.detach(), q.grad(), k.grad(), v.grad()};
      if (blocks == 1) {
        whole = got;
        // One block is the definition: softmax(q k^T / sqrt(d) + mask) v.
        const at::Tensor scores =
            at::matmul(q0, k0.transpose(1, 2)) / std::sqrt(8.0) + bias.narrow(0, past, t);
        EXPECT_LT((y - at::matmul(scores.softmax(-1), v0)).abs().max().item<double>(), 1e-12);
        continue;
      }
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_LT((got[i] - whole[i]).abs().max().item<double>(), 1e-12) << "tensor " << i;
      }
    }
  }
  EXPECT_EQ(causal_query_blocks(64), 1);
  EXPECT_EQ(causal_query_blocks(256), 2);
  EXPECT_EQ(causal_query_blocks(1024), 4);
}

// Under bf16 autocast (runtime.precision bf16) the forward gives fp32's logits to bf16's
// precision, at any length and whichever type ran before: the layers add one causal mask per
// type, made once and cut to each length.
TEST(Gpt, Bf16ForwardMatchesFp32AtAnyLengthAndOrder) {
  at::manual_seed(6);
  ModuleModel model("gpt", make_gpt(tiny()), false);
  at::NoGradGuard no_grad;
  const at::Tensor ids = at::randint(0, 50, {2, 8}, at::kLong);
  const auto bf16 = [&](int64_t t) {
    AutocastScope autocast(at::kBFloat16);
    const at::Tensor logits = model.forward(ids.narrow(1, 0, t));
    EXPECT_EQ(logits.scalar_type(), at::kBFloat16);
    return logits.to(at::kFloat);
  };
  const at::Tensor short_bf16 = bf16(3);  // the bf16 mask is made here, at the context of 8
  const at::Tensor fp32 = model.forward(ids);
  const at::Tensor whole_bf16 = bf16(8);
  const double scale = fp32.abs().max().item<double>();
  EXPECT_LT((whole_bf16 - fp32).abs().max().item<double>(), 0.02 * scale) << "largest " << scale;
  EXPECT_LT((short_bf16 - fp32.narrow(1, 0, 3)).abs().max().item<double>(), 0.02 * scale);
  // Each type again gives what it gave before.
  EXPECT_TRUE(at::equal(model.forward(ids), fp32));
  EXPECT_TRUE(at::equal(bf16(8), whole_bf16));
  EXPECT_TRUE(at::equal(bf16(3), short_bf16));
}

TEST(Gpt, APositionSeesOnlyThePast) {
  at::manual_seed(1);
  ModuleModel model("gpt", make_gpt(tiny()), false);
  at::NoGradGuard no_grad;
  const at::Tensor ids = at::randint(0, 50, {2, 8}, at::kLong);
  at::Tensor changed = ids.clone();
  changed.narrow(1, 5, 3).fill_(7);
  const at::Tensor a = model.forward(ids), b = model.forward(changed);
  EXPECT_TRUE(at::equal(a.narrow(1, 0, 5), b.narrow(1, 0, 5)));
  EXPECT_FALSE(at::allclose(a.narrow(1, 5, 3), b.narrow(1, 5, 3)));
  EXPECT_THROW(model.forward(at::zeros({1, 9}, at::kLong)), Error);  // past the context
}

TEST(Gpt, TheHeadIsTheTokenEmbeddingAndTheBlocksAreTheModel) {
  at::manual_seed(2);
  const GptConfig c = tiny();
  ModuleModel model("gpt", make_gpt(c), false);
  const NamedTensors parameters = model.named_parameters();
  EXPECT_EQ(model.parameter_count(), gpt_parameter_count(c));
  for (const auto& [name, p] : parameters) EXPECT_EQ(name.find("lm_head"), std::string::npos);
  // Both uses of the tied matrix train it: the embedding of the input's token 3 gets a gradient
  // that the head alone does not give it, and the head gives every row one.
  const at::Tensor ids = at::full({1, 4}, 3, at::kLong);
  const at::Tensor targets = at::full({1, 4}, 9, at::kLong);
  const at::Tensor& wte = parameters.front().second;
  ASSERT_EQ(parameters.front().first, "wte.weight");
  TokenCrossEntropyLoss loss;
  loss(model.forward(ids), targets).backward();
  const at::Tensor both = wte.grad().clone();
  wte.mutable_grad().reset();
  const std::vector<Block> blocks = model.blocks();
  at::Tensor x = blocks.front().forward(ids).detach();  // the input path cut off
  for (size_t i = 1; i < blocks.size(); ++i) x = blocks[i].forward(x);
  loss(x, targets).backward();
  const at::Tensor head_only = wte.grad();
  EXPECT_GT((both[3] - head_only[3]).abs().sum().item<double>(), 1e-6);
  EXPECT_TRUE(at::allclose(both[9], head_only[9]));  // token 9 is not in the input
  EXPECT_GT(head_only[9].abs().sum().item<double>(), 0);

  std::vector<std::string> names;
  for (const Block& b : blocks) names.push_back(b.name);
  EXPECT_EQ(names, (std::vector<std::string>{"embedding", "h.0", "h.1", "head"}));
  check_blocks(model, at::randint(0, c.vocab, {2, 6}, at::kLong));
}

TEST(Gpt, PresetsAndShapesThatCannotBe) {
  EXPECT_EQ(gpt_parameter_count(gpt_preset("gpt2", 0)), 124439808);  // GPT-2 small
  const GptConfig mini = gpt_preset("gpt_mini", 65);  // nanoGPT's Shakespeare characters
  EXPECT_NEAR(static_cast<double>(gpt_parameter_count(mini)), 10.7e6, 0.1e6);
  EXPECT_EQ(gpt_preset("gpt_tiny", 4000).n_embd, 128);
  EXPECT_THROW(gpt_preset("gpt5", 100), ConfigError);
  GptConfig odd = tiny();
  odd.n_head = 3;  // 16 is not a multiple of 3
  try {
    make_gpt(odd);
    FAIL() << "16 wide in 3 heads";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("model.gpt.n_embd"), std::string::npos) << e.what();
  }
}

TEST(Gpt, CachedDecodingGivesTheFullForwardsLogits) {
  at::manual_seed(4);
  const GptConfig c = tiny();
  auto net = make_gpt(c);
  ModuleModel model("gpt", net, false);
  at::NoGradGuard no_grad;
  const at::Tensor ids = at::randint(0, c.vocab, {2, 7}, at::kLong);
  const at::Tensor full = model.forward(ids);
  KvCache cache;
  // A prompt of three, then one position at a time.
  const at::Tensor first = forward_cached(*net, ids.narrow(1, 0, 3), cache);
  EXPECT_TRUE(at::allclose(first, full.narrow(1, 0, 3), 1e-5, 1e-5));
  for (int64_t p = 3; p < 7; ++p) {
    const at::Tensor step = forward_cached(*net, ids.narrow(1, p, 1), cache);
    EXPECT_LT((step - full.narrow(1, p, 1)).abs().max().item<double>(), 1e-5) << "position " << p;
  }
  EXPECT_EQ(cache.length(), 7);
  EXPECT_THROW(forward_cached(*net, ids.narrow(1, 0, 2), cache), Error);  // past 8
}

TEST(Gpt, GenerationIsAPureFunctionOfTheSeed) {
  at::manual_seed(5);
  const GptConfig c{2, 2, 16, 16, 50, 0.1, false};
  auto net = make_gpt(c);
  ModuleModel model("gpt", net, false);
  const std::vector<int64_t> prompt = {4, 8, 15};
  Sampling s;
  s.seed = 42;
  s.top_k = 10;
  const auto a = generate(*net, prompt, 10, s);
  ASSERT_EQ(a.size(), 10u);
  at::rand({3});  // the global generator moved: no matter
  EXPECT_EQ(generate(*net, prompt, 10, s), a);
  s.seed = 43;
  EXPECT_NE(generate(*net, prompt, 10, s), a);
  EXPECT_TRUE(net->is_training());  // the mode it had
  // Greedy: each id is the full forward pass's likeliest next token.
  s.temperature = 0;
  const auto greedy = generate(*net, prompt, 5, s);
  std::vector<int64_t> sequence = prompt;
  net->eval();
  at::NoGradGuard no_grad;
  for (const int64_t id : greedy) {
    const at::Tensor logits = model.forward(at::tensor(sequence, at::kLong).unsqueeze(0));
    EXPECT_EQ(logits[0][-1].argmax().item<int64_t>(), id);
    sequence.push_back(id);
  }
  // Past the context of 16 the window slides: each id is the likeliest after the last 16.
  const auto slid = generate(*net, prompt, 30, s);
  ASSERT_EQ(slid.size(), 30u);
  sequence = prompt;
  for (const int64_t id : slid) {
    const auto kept = static_cast<std::ptrdiff_t>(std::min<size_t>(16, sequence.size()));
    const std::vector<int64_t> window(sequence.end() - kept, sequence.end());
    const at::Tensor logits = model.forward(at::tensor(window, at::kLong).unsqueeze(0));
    EXPECT_EQ(logits[0][-1].argmax().item<int64_t>(), id);
    sequence.push_back(id);
  }
  // A prompt longer than the context keeps its last 16 ids.
  const std::vector<int64_t> last(sequence.end() - 16, sequence.end());
  EXPECT_EQ(generate(*net, sequence, 3, s), generate(*net, last, 3, s));
  EXPECT_THROW(generate(*net, prompt, -1, s), ConfigError);
}

TEST(TokenCrossEntropyLoss, IsTheMeanOverEveryToken) {
  at::manual_seed(3);
  const at::Tensor logits = at::randn({2, 3, 5});
  const at::Tensor targets = at::randint(0, 5, {2, 3}, at::kLong);
  TokenCrossEntropyLoss loss;
  double expected = 0;
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t t = 0; t < 3; ++t) {
      const at::Tensor row = logits[b][t];
      expected += (row.exp().sum().log() - row[targets[b][t].item<int64_t>()]).item<double>();
    }
  }
  EXPECT_NEAR(loss(logits, targets).item<double>(), expected / 6, 1e-5);
  EXPECT_NEAR(loss(logits, targets, Reduction::kSum).item<double>(), expected, 1e-4);
}

// The fused loss against LibTorch's cross_entropy, value and gradient, on float logits and on
// bf16 ones (whose gradient is bf16, as autocast's would be after narrowing).
TEST(TokenCrossEntropyLoss, MatchesLibTorchsCrossEntropyAndItsGradient) {
  at::manual_seed(4);
  const at::Tensor base = at::randn({3, 7, 301}) * 4;
  const at::Tensor targets = at::randint(0, 301, {3, 7}, at::kLong);
  for (auto type : {at::kFloat, at::kBFloat16}) {
    SCOPED_TRACE(c10::toString(type));
    const at::Tensor ours_in = base.to(type).detach().clone().set_requires_grad(true);
    const at::Tensor theirs_in = base.to(type).detach().clone().set_requires_grad(true);
    const at::Tensor ours = TokenCrossEntropyLoss()(ours_in, targets);
    const at::Tensor theirs =
        at::cross_entropy_loss(theirs_in.to(at::kFloat).reshape({-1, 301}), targets.reshape({-1}));
    EXPECT_EQ(ours.scalar_type(), at::kFloat);
    EXPECT_NEAR(ours.item<double>(), theirs.item<double>(), 1e-5 * theirs.item<double>());
    (ours * 3).backward();
    (theirs * 3).backward();
    ASSERT_EQ(ours_in.grad().scalar_type(), type);
    const double tolerance = type == at::kFloat ? 1e-6 : 1e-2;
    const at::Tensor a = ours_in.grad().to(at::kFloat), b = theirs_in.grad().to(at::kFloat);
    EXPECT_LE((a - b).abs().max().item<double>(), tolerance * b.abs().max().item<double>());
    if (type == at::kFloat) {
      EXPECT_NEAR(a.sum().item<double>(), 0.0, 1e-5);  // each row's softmax sums to its one-hot
    }
  }
  TokenCrossEntropyLoss loss;
  EXPECT_THROW(loss(at::randn({2, 5}), at::tensor({1, 5}, at::kLong)), Error);
}

}  // namespace
}  // namespace loom::models
