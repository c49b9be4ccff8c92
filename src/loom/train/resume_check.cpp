#include "loom/train/resume_check.h"

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "loom/core/durable_file.h"
#include "loom/core/error.h"
#include "loom/train/checkpoint.h"

namespace loom::train {
namespace {

namespace fs = std::filesystem;
using FlatValues = std::map<std::string, std::string>;

// {"model": {"name": "gpt"}} -> {"model.name": "\"gpt\""}: every leaf under its dotted key, as
// JSON text, so that values of any type compare as written.
void flatten(const nlohmann::json& node, const std::string& prefix, FlatValues& out) {
  if (!node.is_object()) {
    out[prefix] = node.dump();
    return;
  }
  for (const auto& [name, child] : node.items()) {
    flatten(child, prefix.empty() ? name : prefix + "." + name, out);
  }
}

FlatValues flat_values(const nlohmann::json& config) {
  FlatValues out;
  flatten(config, "", out);
  return out;
}

bool is_bound(const std::string& key) {
  // Dropout is a regulariser, not a shape: changing it on resume is a fine-tuning choice.
  if (key.size() >= 8 && key.compare(key.size() - 8, 8, ".dropout") == 0) return false;
  for (const std::string& bound : checkpoint_bound_keys()) {
    const bool prefix = !bound.empty() && bound.back() == '.';
    if (prefix ? key.rfind(bound, 0) == 0 : key == bound) return true;
  }
  return false;
}

// "\"gpt\"" -> "gpt", for messages and fields.
std::string plain(const std::string& json_text) {
  const auto value = nlohmann::json::parse(json_text);
  return value.is_string() ? value.get<std::string>() : json_text;
}

}  // namespace

const std::vector<std::string>& checkpoint_bound_keys() {
  static const std::vector<std::string> keys = {
      "model.",           // the parameters' names and shapes
      "optimizer.name",   // the optimizer state's fields
      "data.source",      // what a sample is
      "data.seq_len",     // a language model's windows
      "data.image_size",  // an image model's inputs (a ViT's position table)
      "data.channels",
      "data.classes",  // the classifier's outputs
  };
  return keys;
}

std::optional<std::string> checkpoint_to_resume(const std::string& out_dir) {
  const fs::path dir = fs::path(out_dir) / "checkpoints";
  if (!fs::is_directory(dir)) return std::nullopt;
  return CheckpointStore(dir.string(), 1).latest();
}

void check_resume_config(const Config& config, const std::string& checkpoint_path) {
  const std::string manifest_path = checkpoint_path + "/manifest.json";
  nlohmann::json written;
  try {
    written = nlohmann::json::parse(read_file(manifest_path)).at("config");
  } catch (const nlohmann::json::exception& e) {
    throw DataError("checkpoint '" + manifest_path + "' is malformed: " + e.what(),
                    {{"path", manifest_path}});
  }
  const FlatValues then = flat_values(written);
  const FlatValues now = flat_values(nlohmann::json::parse(config_to_json(config)));
  for (const auto& [key, value] : now) {
    if (!is_bound(key)) continue;
    const auto it = then.find(key);
    if (it == then.end() || it->second == value) continue;
    throw ConfigError::at_key(key,
                              "is " + plain(value) + " but checkpoint '" + checkpoint_path +
                                  "' was written with " + plain(it->second) +
                                  "; a resume keeps the model, the optimizer and the data's "
                                  "shape (start a new run, or resume without changing it)",
                              {{"checkpoint_value", plain(it->second)},
                               {"value", plain(value)},
                               {"checkpoint", checkpoint_path}});
  }
}

}  // namespace loom::train
