// make_model: the configured architecture for the data's input shape.
#include "loom/core/error.h"
#include "loom/models/cnn.h"
#include "loom/models/gpt.h"
#include "loom/models/mlp.h"
#include "loom/models/model.h"
#include "loom/models/resnet.h"
#include "loom/models/torchscript_model.h"
#include "loom/models/vit.h"

namespace loom::models {

std::unique_ptr<Model> make_model(const ModelConfig& config, const InputSpec& input) {
  const std::string& name = config.name;
  if (name == "torchscript") return load_torchscript(config.torchscript);
  if (name == "gpt") {
    if (input.task != Task::kLanguageModel) {
      throw ConfigError("config key 'model.name': gpt is a language model; it trains on tokens");
    }
    return std::make_unique<ModuleModel>(
        name, make_gpt(gpt_config(config.gpt, input.classes, input.seq_len)), false);
  }
  if (input.task != Task::kImageClassification) {
    throw ConfigError("config key 'model.name': " + name + " classifies images; tokens need gpt");
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

int64_t configured_context(const ModelConfig& config) {
  return config.name == "gpt" ? gpt_preset(config.gpt.preset, 2).seq_len : 0;
}

}  // namespace loom::models
