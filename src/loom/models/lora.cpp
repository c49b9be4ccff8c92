#include "loom/models/lora.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <map>

#include "loom/core/error.h"
#include "loom/core/text.h"
#include "loom/models/planned_layers.h"
#include "loom/models/tensor_plan.h"

namespace loom::models {

std::vector<std::string> apply_lora(Model& model, const LoraModelConfig& config) {
  torch::nn::Module* root = model.modules();
  if (!root) {
    throw ConfigError::at_key("model.lora.rank",
                              "model '" + model.name() + "' has no linears to adapt",
                              {{"value", std::to_string(config.rank)}});
  }
  return apply_lora(*root, config, model.name());
}

std::vector<std::string> apply_lora(torch::nn::Module& root, const LoraModelConfig& config,
                                    const std::string& what) {
  if (config.targets.empty()) {
    throw ConfigError::at_key("model.lora.targets",
                              "name the linears to adapt (\"layers.*.self_attn.q_proj\")",
                              {{"problem", "empty"}});
  }
  std::vector<std::pair<std::string, Linear*>> linears;
  for (const auto& item : root.named_modules()) {
    if (auto* linear = dynamic_cast<Linear*>(item.value().get())) {
      linears.emplace_back(item.key(), linear);
    }
  }
  std::vector<Linear*> chosen;
  std::vector<std::string> names;
  for (const std::string& pattern : config.targets) {
    bool named = false;
    for (const auto& [name, linear] : linears) {
      if (!name_matches(pattern, name)) continue;
      named = true;
      if (std::find(chosen.begin(), chosen.end(), linear) == chosen.end()) {
        chosen.push_back(linear);
        names.push_back(name);
      }
    }
    if (!named) {
      throw ConfigError::at_key("model.lora.targets",
                                "'" + pattern + "' names no linear of the model '" + what + "'",
                                {{"pattern", pattern}, {"problem", "no_linear"}});
    }
  }
  for (auto& p : root.parameters()) p.requires_grad_(false);
  for (Linear* linear : chosen) linear->add_adapter(config.rank, config.alpha, config.dropout);
  return names;
}

bool is_lora_parameter(const std::string& name) {
  return ends_with(name, ".lora_A.weight") || ends_with(name, ".lora_B.weight");
}

NamedTensors merge_lora(const NamedTensors& tensors, const LoraModelConfig& config) {
  std::map<std::string, at::Tensor> by_name(tensors.begin(), tensors.end());
  const double scale = config.alpha / static_cast<double>(config.rank);
  NamedTensors merged;
  for (const auto& [name, t] : tensors) {
    if (is_lora_parameter(name)) continue;
    const std::string linear = ends_with(name, ".weight") ? name.substr(0, name.size() - 7) : "";
    const auto a = by_name.find(linear + ".lora_A.weight");
    if (linear.empty() || a == by_name.end()) {
      merged.emplace_back(name, t);
      continue;
    }
    const at::Tensor& b = by_name.at(linear + ".lora_B.weight");
    merged.emplace_back(name, t + at::matmul(b, a->second) * scale);
  }
  return merged;
}

}  // namespace loom::models
