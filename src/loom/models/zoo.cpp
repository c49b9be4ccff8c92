// make_model: the configured architecture for the data's input shape.
#include "loom/core/error.h"
#include "loom/models/cnn.h"
#include "loom/models/gpt.h"
#include "loom/models/hf_model.h"
#include "loom/models/llama.h"
#include "loom/models/mlp.h"
#include "loom/models/model.h"
#include "loom/models/resnet.h"
#include "loom/models/torchscript_model.h"
#include "loom/models/vit.h"

namespace loom::models {

namespace {

// The keys that set a shape: left unset beside model.pretrained, whose config.json gives it.
void check_no_shape_keys(const ModelConfig& config) {
  const GptModelConfig& g = config.gpt;
  const LlamaModelConfig& l = config.llama;
  const std::vector<std::pair<const char*, bool>> set = {
      {"model.gpt.n_layer", g.n_layer > 0},
      {"model.gpt.n_head", g.n_head > 0},
      {"model.gpt.n_embd", g.n_embd > 0},
      {"model.llama.n_layer", l.n_layer > 0},
      {"model.llama.n_head", l.n_head > 0},
      {"model.llama.n_kv_head", l.n_kv_head > 0},
      {"model.llama.n_embd", l.n_embd > 0},
      {"model.llama.hidden", l.hidden > 0},
      {"model.llama.rope_theta", l.rope_theta > 0},
      {"model.llama.embeddings", l.embeddings != "preset"}};
  for (const auto& [key, is_set] : set) {
    if (is_set) {
      throw ConfigError::at_key(key,
                                "set beside model.pretrained, whose config.json gives the shape",
                                {{"problem", "beside_pretrained"}});
    }
  }
}

// The network model.pretrained's config.json describes (its weights are loaded after:
// train/pretrained.h), for token data whose vocabulary and windows it must take.
std::unique_ptr<Model> make_pretrained_shape(const ModelConfig& config, const InputSpec& input) {
  check_no_shape_keys(config);
  HfModel hf = read_hf_config(config.pretrained);
  if (hf.family != config.name) {
    throw ConfigError::at_key(
        "model.name",
        config.name + ", but model.pretrained '" + config.pretrained + "' holds a " + hf.family,
        {{"value", config.name}, {"expected", hf.family}});
  }
  if (input.classes > hf.vocab()) {
    throw ConfigError::at_key(
        "data.path",
        "the token data's vocabulary of " + std::to_string(input.classes) +
            " is larger than the pretrained model's " + std::to_string(hf.vocab()) +
            " (tokenize with the model's own tokenizer)",
        {{"value", std::to_string(input.classes)}, {"expected", std::to_string(hf.vocab())}});
  }
  if (input.seq_len > hf.context()) {
    throw ConfigError::at_key(
        "data.seq_len",
        std::to_string(input.seq_len) + " positions, more than the pretrained model's " +
            std::to_string(hf.context()),
        {{"value", std::to_string(input.seq_len)}, {"expected", std::to_string(hf.context())}});
  }
  if (hf.family == "gpt") {
    hf.gpt.dropout = config.gpt.dropout;
    return std::make_unique<ModuleModel>(config.name, make_gpt(hf.gpt), false);
  }
  return std::make_unique<ModuleModel>(config.name, make_llama(hf.llama), false);
}

}  // namespace

std::unique_ptr<Model> make_model(const ModelConfig& config, const InputSpec& input) {
  const std::string& name = config.name;
  if (name == "torchscript") return load_torchscript(config.torchscript);
  if (is_language_model(name)) {
    if (input.task != Task::kLanguageModel) {
      throw ConfigError("config key 'model.name': " + name +
                        " is a language model; it trains on tokens");
    }
    if (!config.pretrained.empty()) return make_pretrained_shape(config, input);
    if (name == "gpt") {
      return std::make_unique<ModuleModel>(
          name, make_gpt(gpt_config(config.gpt, input.classes, input.seq_len)), false);
    }
    return std::make_unique<ModuleModel>(
        name, make_llama(llama_config(config.llama, input.classes, input.seq_len)), false);
  }
  if (!config.pretrained.empty()) {
    throw ConfigError::at_key("model.pretrained",
                              name +
                                  " does not load Hugging Face folders (gpt "
                                  "and llama do)",
                              {{"value", name}, {"problem", "not_a_language_model"}});
  }
  if (input.task != Task::kImageClassification) {
    throw ConfigError("config key 'model.name': " + name +
                      " classifies images; tokens need gpt or llama");
  }
  if (name == "mlp") {
    return std::make_unique<ModuleModel>(name, make_mlp(input, config.dropout), false);
  }
  if (name == "cnn") {
    return std::make_unique<ModuleModel>(
        name, make_cnn(input, config.width, config.depth, config.dropout), true);
  }
  if (name == "resnet18") return std::make_unique<ModuleModel>(name, make_resnet(input, 18), true);
  if (name == "resnet50") return std::make_unique<ModuleModel>(name, make_resnet(input, 50), true);
  if (name == "vit_tiny") {
    return std::make_unique<ModuleModel>(name, make_vit_tiny(input, config.patch_size), false);
  }
  throw ConfigError("config key 'model.name': unknown model '" + name + "'");
}

bool is_language_model(const std::string& name) { return name == "gpt" || name == "llama"; }

int64_t configured_context(const ModelConfig& config) {
  if (is_language_model(config.name) && !config.pretrained.empty()) {
    return read_hf_config(config.pretrained).context();
  }
  if (config.name == "gpt") return gpt_preset(config.gpt.preset, 2).seq_len;
  if (config.name == "llama") return llama_preset(config.llama.preset).seq_len;
  return 0;
}

}  // namespace loom::models
