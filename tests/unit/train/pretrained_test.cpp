// Hugging Face model folders in (model.pretrained): a Llama (untied, with Llama 3.1's rope
// scaling; and tied, sharded, in the older config form) and a GPT-2, made at random by
// transformers (make_hf_folders.py), give transformers' logits within 1e-5 in one process and
// split over a tensor group of two; and the folders Loom cannot take are refused by name.
#include "loom/train/pretrained.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <thread>

#include "loom/core/error.h"
#include "loom/models/hf_model.h"
#include "loom/models/module_model.h"
#include "loom/models/tensor_plan.h"
#include "loom/train/safetensors.h"
#include "tools/build_paths.h"
#include "tools/test_support.h"
#include "unit/models/thread_tensor_groups.h"

namespace loom::train {
namespace {

using models::ThreadGroups;

std::unique_ptr<models::Model> pretrained(const std::string& dir, const std::string& family) {
  ModelConfig config;
  config.name = family;
  config.pretrained = dir;
  models::InputSpec input;
  input.task = models::Task::kLanguageModel;
  input.classes = models::read_hf_config(dir).vocab();
  input.seq_len = 12;
  std::unique_ptr<models::Model> model = models::make_model(config, input);
  load_pretrained(dir, *model);
  model->train(false);
  return model;
}

at::Tensor tensor(const models::NamedTensors& tensors, const std::string& name) {
  for (const auto& [n, t] : tensors) {
    if (n == name) return t;
  }
  ADD_FAILURE() << "no tensor " << name;
  return {};
}

TEST(Pretrained, FoldersGiveTransformersLogitsInOneProcessAndATensorGroup) {
  const std::string python = test::torch_python();
  if (python.empty()) {
    GTEST_SKIP() << "no Python with torch (LOOM_PYTHON; scripts/install-deps.sh makes .venv)";
  }
  if (test::run_command(python + " -c 'import transformers'").exit_code != 0) {
    GTEST_SKIP() << "no transformers in " << python << " (scripts/requirements.txt)";
  }
  test::TempDir dir;
  const auto made = test::run_command(python + " " + test::source_dir() +
                                      "/tests/unit/train/make_hf_folders.py " + dir.path());
  ASSERT_EQ(made.exit_code, 0) << made.output;
  for (const auto& [name, family] : {std::pair<std::string, std::string>{"llama", "llama"},
                                     {"llama_tied", "llama"},
                                     {"gpt2", "gpt"}}) {
    SCOPED_TRACE(name);
    const models::NamedTensors reference = read_safetensors(dir / (name + ".logits.safetensors"));
    const at::Tensor ids = tensor(reference, "ids"), want = tensor(reference, "logits");
    at::NoGradGuard no_grad;
    const auto one = pretrained(dir / name, family);
    EXPECT_LT((one->forward(ids) - want).abs().max().item<double>(), 1e-5);

    ThreadGroups pair(2);
    ThreadGroups::Group groups[2] = {{pair, 0}, {pair, 1}};
    std::unique_ptr<models::Model> split[2] = {pretrained(dir / name, family),
                                               pretrained(dir / name, family)};
    at::Tensor logits[2];
    bool by_vocabulary[2] = {false, false};
    std::vector<std::thread> ranks;
    for (int k = 0; k < 2; ++k) {
      by_vocabulary[k] = models::apply_tensor_plan(*split[k], groups[k]).output_split;
      ranks.emplace_back([&, k] {
        at::NoGradGuard evaluation;
        logits[k] = split[k]->forward(ids);
      });
    }
    for (auto& rank : ranks) rank.join();
    for (int k = 0; k < 2; ++k) {
      const int64_t share = logits[k].size(2);
      const at::Tensor mine = by_vocabulary[k] ? want.narrow(2, k * share, share) : want;
      EXPECT_LT((logits[k] - mine).abs().max().item<double>(), 1e-5) << "rank " << k;
    }
  }
}

// A folder written here: config.json as given, and the tensors of a Llama of that shape as
// Hugging Face names them.
std::string llama_folder(const test::TempDir& root, const std::string& name,
                         const std::string& extra_settings, int64_t stored_layers) {
  const std::string dir = root / name;
  std::filesystem::create_directories(dir);
  test::write_text(dir + "/config.json",
                   "{\"model_type\": \"llama\", \"vocab_size\": 16, \"hidden_size\": 8, "
                   "\"intermediate_size\": 12, \"num_hidden_layers\": 1, "
                   "\"num_attention_heads\": 2, \"num_key_value_heads\": 1, "
                   "\"max_position_embeddings\": 32, \"tie_word_embeddings\": true" +
                       extra_settings + "}");
  models::NamedTensors tensors = {{"model.embed_tokens.weight", at::randn({16, 8})},
                                  {"model.norm.weight", at::ones({8})}};
  for (int64_t l = 0; l < stored_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    for (const auto& [n, shape] : std::vector<std::pair<std::string, std::vector<int64_t>>>{
             {"input_layernorm.weight", {8}},
             {"post_attention_layernorm.weight", {8}},
             {"self_attn.q_proj.weight", {8, 8}},
             {"self_attn.k_proj.weight", {4, 8}},
             {"self_attn.v_proj.weight", {4, 8}},
             {"self_attn.o_proj.weight", {8, 8}},
             {"mlp.gate_proj.weight", {12, 8}},
             {"mlp.up_proj.weight", {12, 8}},
             {"mlp.down_proj.weight", {8, 12}}}) {
      tensors.emplace_back(p + n, at::randn(shape));
    }
  }
  write_safetensors(dir + "/model.safetensors", tensors);
  return dir;
}

DataError load_error(const std::string& dir) {
  try {
    pretrained(dir, "llama");
  } catch (const DataError& e) {
    return e;
  }
  ADD_FAILURE() << "expected a DataError loading " << dir;
  return DataError("none");
}

ConfigError config_error(const std::string& dir, const std::string& family) {
  try {
    pretrained(dir, family);
  } catch (const ConfigError& e) {
    return e;
  }
  ADD_FAILURE() << "expected a ConfigError loading " << dir;
  return ConfigError("none");
}

TEST(Pretrained, FoldersLoomCannotTakeAreRefusedByName) {
  test::TempDir root;
  // The folder as written loads.
  EXPECT_NO_THROW(pretrained(llama_folder(root, "fits", "", 1), "llama"));

  const DataError shape = load_error(llama_folder(root, "wide", ", \"intermediate_size\": 10", 1));
  EXPECT_EQ(shape.field("problem"), "shape");
  EXPECT_EQ(shape.field("tensor"), "model.layers.0.mlp.gate_proj.weight");  // the first such
  EXPECT_EQ(shape.field("expected"), "[10, 8]");

  const DataError missing = load_error(llama_folder(root, "short", "", 0));
  EXPECT_EQ(missing.field("problem"), "missing");
  EXPECT_EQ(missing.field("tensor"), "layers.0.input_layernorm.weight");

  const DataError extra = load_error(llama_folder(root, "deep", "", 2));
  EXPECT_EQ(extra.field("problem"), "unexpected");
  EXPECT_EQ(extra.field("tensor"), "model.layers.1.input_layernorm.weight");

  const ConfigError bias =
      config_error(llama_folder(root, "bias", ", \"mlp_bias\": true", 1), "llama");
  EXPECT_EQ(bias.key(), "model.pretrained");
  EXPECT_EQ(bias.field("hf_key"), "mlp_bias");
  EXPECT_EQ(bias.field("problem"), "unsupported");

  const ConfigError family = config_error(root / "fits", "gpt");
  EXPECT_EQ(family.key(), "model.name");
  EXPECT_EQ(family.field("expected"), "llama");

  const ConfigError none = config_error(root.path(), "llama");
  EXPECT_EQ(none.key(), "model.pretrained");
  EXPECT_EQ(none.field("problem"), "no_config");
}

}  // namespace
}  // namespace loom::train
