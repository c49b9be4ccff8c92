#include "loom/train/pretrained.h"

#include <c10/core/GradMode.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "loom/core/error.h"
#include "loom/models/hf_model.h"
#include "loom/models/lora.h"
#include "loom/train/safetensors.h"

namespace loom::train {
namespace {

std::string shape_text(at::IntArrayRef sizes) { return c10::str(sizes); }

// The folder's weight files: one, or the shards its index lists, in the order first listed.
std::vector<std::string> weight_files(const std::string& dir) {
  const std::string single = dir + "/model.safetensors";
  if (std::filesystem::exists(single)) return {single};
  const std::string index = dir + "/model.safetensors.index.json";
  std::ifstream in(index);
  if (!in) {
    throw ConfigError::at_key(
        "model.pretrained", "no model.safetensors or model.safetensors.index.json in '" + dir + "'",
        {{"path", dir}, {"problem", "no_weights"}});
  }
  std::vector<std::string> files;
  try {
    std::set<std::string> seen;
    const nlohmann::json parsed = nlohmann::json::parse(in);  // outlives the loop over it
    for (const auto& [name, file] : parsed.at("weight_map").items()) {
      const std::string path = dir + "/" + file.get<std::string>();
      if (seen.insert(path).second) files.push_back(path);
    }
  } catch (const nlohmann::json::exception& e) {
    throw DataError(
        "pretrained: '" + index + "' has no weight_map of tensor names to files: " + e.what(),
        {{"path", index}, {"problem", "bad_index"}});
  }
  return files;
}

}  // namespace

void load_pretrained(const std::string& dir, models::Model& model) {
  const models::HfModel hf = models::read_hf_config(dir);
  std::map<std::string, at::Tensor> targets;
  for (const auto& [name, t] : model.named_parameters()) targets[name] = t;
  std::set<std::string> loaded;
  at::NoGradGuard no_grad;
  for (const std::string& file : weight_files(dir)) {
    for (const auto& [hf_name, stored] : read_safetensors(file)) {
      const std::optional<std::string> name = models::loom_tensor_name(hf, hf_name);
      if (name && name->empty()) continue;  // not kept
      const auto target = name ? targets.find(*name) : targets.end();
      if (target == targets.end()) {
        throw DataError("pretrained: '" + file + "' holds '" + hf_name + "', which a " + hf.family +
                            " of this shape does not have",
                        {{"path", file}, {"tensor", hf_name}, {"problem", "unexpected"}});
      }
      const at::Tensor value = models::stored_transposed(hf, *name) ? stored.t() : stored;
      if (value.sizes() != target->second.sizes()) {
        throw DataError("pretrained: '" + file + "' holds '" + hf_name + "' of shape " +
                            shape_text(value.sizes()) + ", the model's '" + *name + "' is " +
                            shape_text(target->second.sizes()),
                        {{"path", file},
                         {"tensor", hf_name},
                         {"problem", "shape"},
                         {"value", shape_text(value.sizes())},
                         {"expected", shape_text(target->second.sizes())}});
      }
      target->second.copy_(value);
      loaded.insert(*name);
    }
  }
  for (const auto& [name, t] : targets) {
    if (!loaded.count(name)) {
      throw DataError("pretrained: '" + dir + "' has no tensor for the model's '" + name + "'",
                      {{"path", dir}, {"tensor", name}, {"problem", "missing"}});
    }
  }
}

void save_hf_folder(const std::string& dir, const models::HfModel& shape,
                    const models::NamedTensors& tensors) {
  namespace fs = std::filesystem;
  for (const char* file : {"config.json", "model.safetensors", "model.safetensors.index.json"}) {
    if (fs::exists(dir + "/" + file)) {
      throw ConfigError::at_key("--out", "'" + dir + "' holds a model already (" + file + ")",
                                {{"path", dir}, {"problem", "exists"}});
    }
  }
  // Each tensor in the type the source folder stored it in (bf16, most published ones), so that
  // a round trip gives its bits back; Loom's own fp32 where there is no source folder.
  std::map<std::string, at::ScalarType> source_types;
  if (!shape.dir.empty()) {
    for (const std::string& file : weight_files(shape.dir)) {
      source_types.merge(read_safetensors_dtypes(file));
    }
  }
  fs::create_directories(dir);
  models::NamedTensors named;
  for (const auto& [name, t] : tensors) {
    at::Tensor whole = models::stored_transposed(shape, name) ? t.t().contiguous() : t;
    const std::string hf_name = models::hf_tensor_name(shape, name);
    if (const auto type = source_types.find(hf_name); type != source_types.end()) {
      whole = whole.to(type->second);
    }
    named.emplace_back(hf_name, whole);
  }
  // The weights first and config.json last: a folder with a config.json is a whole one.
  write_safetensors(dir + "/model.safetensors", named, {{"format", "pt"}});
  if (!shape.dir.empty()) {
    for (const char* file : {"tokenizer.json", "tokenizer_config.json", "tokenizer.model",
                             "special_tokens_map.json", "generation_config.json"}) {
      if (fs::exists(shape.dir + "/" + file)) {
        fs::copy_file(shape.dir + "/" + file, dir + "/" + file,
                      fs::copy_options::overwrite_existing);
      }
    }
    fs::copy_file(shape.dir + "/config.json", dir + "/config.json");
  } else {
    std::ofstream(dir + "/config.json") << models::hf_config_json(shape);
  }
}

void save_peft_adapter(const std::string& dir, const models::HfModel& shape,
                       const models::NamedTensors& tensors, const LoraModelConfig& lora) {
  namespace fs = std::filesystem;
  for (const char* file : {"adapter_config.json", "adapter_model.safetensors"}) {
    if (fs::exists(dir + "/" + file)) {
      throw ConfigError::at_key("--out", "'" + dir + "' holds an adapter already (" + file + ")",
                                {{"path", dir}, {"problem", "exists"}});
    }
  }
  fs::create_directories(dir);
  models::NamedTensors adapters;
  std::vector<std::string> linears;
  for (const auto& [name, t] : tensors) {
    if (!models::is_lora_parameter(name)) continue;
    // "<linear>.lora_A.weight": PEFT names it under its wrapper of the whole model.
    adapters.emplace_back("base_model.model." + models::hf_tensor_name(shape, name), t);
    const std::string linear = models::hf_tensor_name(shape, name.substr(0, name.size() - 14));
    if (std::find(linears.begin(), linears.end(), linear) == linears.end()) {
      linears.push_back(linear);
    }
  }
  write_safetensors(dir + "/adapter_model.safetensors", adapters, {{"format", "pt"}});
  const nlohmann::json config = {
      {"peft_type", "LORA"},
      {"task_type", "CAUSAL_LM"},
      {"base_model_name_or_path", shape.dir},
      {"r", lora.rank},
      {"lora_alpha", lora.alpha},
      {"lora_dropout", lora.dropout},
      {"target_modules", linears},
      {"bias", "none"},
      // GPT-2's Conv1D keeps its weight as [in, out]; the adapters are as any linear's.
      {"fan_in_fan_out", shape.family == "gpt"},
      {"inference_mode", true},
      {"init_lora_weights", true},
      {"use_rslora", false},
      {"use_dora", false},
      {"modules_to_save", nullptr}};
  std::ofstream(dir + "/adapter_config.json") << config.dump(2) << "\n";
}

}  // namespace loom::train
