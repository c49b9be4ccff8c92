// LoRA adapters: they start as the identity (B is zero), only they learn (the base gets no
// gradient), the adapted model computes what the merged plain model does, and a target that names
// no linear is refused by name.
#include "loom/models/lora.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "loom/core/error.h"
#include "loom/models/gpt.h"
#include "loom/models/llama.h"
#include "loom/models/module_model.h"
#include "unit/models/small_llama.h"

namespace loom::models {
namespace {

LoraModelConfig adapters(std::vector<std::string> targets) {
  LoraModelConfig lora;
  lora.rank = 4;
  lora.alpha = 8;
  lora.targets = std::move(targets);
  return lora;
}

TEST(Lora, AdaptersStartAsTheIdentityAndAloneLearn) {
  at::manual_seed(0);
  ModuleModel model("llama", make_llama(small_llama()), false);
  const at::Tensor ids = at::randint(0, 50, {2, 8}, at::kLong);
  const at::Tensor before = model.forward(ids).detach();
  const auto adapted = apply_lora(model, adapters({"*.q_proj", "layers.1.mlp.*"}));
  EXPECT_EQ(adapted,
            (std::vector<std::string>{"layers.0.self_attn.q_proj", "layers.1.self_attn.q_proj",
                                      "layers.1.mlp.gate_proj", "layers.1.mlp.up_proj",
                                      "layers.1.mlp.down_proj"}));
  EXPECT_TRUE(at::equal(model.forward(ids), before));  // B starts at zero
  int64_t trainable = 0;
  for (const auto& [name, p] : model.named_parameters()) {
    EXPECT_EQ(p.requires_grad(), is_lora_parameter(name)) << name;
    if (p.requires_grad()) trainable += p.numel();
  }
  // q_proj: A 4 x 16, B 16 x 4; gate and up: A 4 x 16, B 24 x 4; down: A 4 x 24, B 16 x 4.
  EXPECT_EQ(trainable, 2 * (64 + 64) + 2 * (64 + 96) + (96 + 64));
  model.forward(ids).sum().backward();
  for (const auto& [name, p] : model.named_parameters()) {
    EXPECT_EQ(p.grad().defined(), is_lora_parameter(name)) << name;
  }
}

TEST(Lora, TheAdaptedModelIsTheMergedOne) {
  for (const bool gpt : {false, true}) {
    SCOPED_TRACE(gpt ? "gpt" : "llama");
    const auto make = [gpt] {
      at::manual_seed(3);
      return gpt ? make_gpt({2, 2, 16, 8, 50, 0.0, false}) : make_llama(small_llama());
    };
    ModuleModel adapted("adapted", make(), false), plain("plain", make(), false);
    const LoraModelConfig lora =
        adapters(gpt ? std::vector<std::string>{"h.*.attn.c_attn", "h.1.mlp.c_proj"}
                     : std::vector<std::string>{"*.v_proj", "*.o_proj"});
    apply_lora(adapted, lora);
    {
      at::NoGradGuard no_grad;
      for (const auto& [name, p] : adapted.named_parameters()) {
        if (is_lora_parameter(name)) p.normal_(0, 0.2);
      }
      const NamedTensors merged = merge_lora(adapted.named_parameters(), lora);
      const NamedTensors targets = plain.named_parameters();
      ASSERT_EQ(merged.size(), targets.size());
      for (size_t i = 0; i < merged.size(); ++i) {
        ASSERT_EQ(merged[i].first, targets[i].first);
        targets[i].second.copy_(merged[i].second);
      }
    }
    adapted.train(false);
    plain.train(false);
    at::NoGradGuard no_grad;
    const at::Tensor ids = at::randint(0, 50, {2, 8}, at::kLong);
    EXPECT_LT((adapted.forward(ids) - plain.forward(ids)).abs().max().item<double>(), 1e-5);
  }
}

TEST(Lora, ATargetThatNamesNoLinearIsRefused) {
  ModuleModel model("llama", make_llama(small_llama()), false);
  try {
    apply_lora(model, adapters({"*.q_proj", "*.c_attn"}));
    FAIL() << "the Llama has no c_attn";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.key(), "model.lora.targets");
    EXPECT_EQ(e.field("pattern"), "*.c_attn");
  }
  try {
    apply_lora(model, adapters({}));
    FAIL() << "no targets";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.key(), "model.lora.targets");
    EXPECT_EQ(e.field("problem"), "empty");
  }
}

}  // namespace
}  // namespace loom::models
