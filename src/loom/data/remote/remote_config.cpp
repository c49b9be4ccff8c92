#include "loom/data/remote/remote_config.h"

#include <yaml-cpp/yaml.h>

#include <filesystem>

#include "loom/core/error.h"
#include "loom/data/transform_registry.h"

namespace loom::data {
namespace {

constexpr const char* kOrigin = "sent by the trainer";

// Both already resolved: `path` is `root` or lies below it.
bool is_inside(const std::filesystem::path& path, const std::filesystem::path& root) {
  std::string p = path.string(), r = root.string();
  while (r.size() > 1 && r.back() == '/') r.pop_back();
  if (r == "/") return true;
  return p == r || p.rfind(r + "/", 0) == 0;
}

}  // namespace

std::string remote_config_text(const Config& config, int64_t batch_size) {
  YAML::Node full = YAML::Load(config_to_yaml(config));
  YAML::Node data = full["data"];
  data.remove("remote");
  data["batch_size"] = batch_size;
  data["global_batch"] = 0;  // the worker builds one rank's batches
  YAML::Node sent(YAML::NodeType::Map);
  sent["seed"] = full["seed"];
  sent["data"] = data;
  YAML::Emitter out;
  out << sent;
  return out.c_str();
}

Config parse_remote_config(const std::string& text) {
  YAML::Node node;
  try {
    node = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw ConfigError(std::string("data configuration ") + kOrigin + " is not YAML: " + e.what(),
                      {{"problem", "not_yaml"}});
  }
  if (!node.IsMap()) {
    throw ConfigError(std::string("data configuration ") + kOrigin + " is not a mapping of keys",
                      {{"problem", "not_mapping"}});
  }
  for (const auto& entry : node) {
    if (!entry.first.IsScalar()) {
      throw ConfigError(std::string("data configuration ") + kOrigin +
                            ": a key must be a name, not a list or a mapping",
                        {{"problem", "key_not_name"}});
    }
    const std::string key = entry.first.Scalar();
    if (key != "seed" && key != "data") {
      throw ConfigError(
          "config key '" + key + "' (" + kOrigin + "): a data worker accepts only seed and data",
          {{"problem", "not_accepted"}, {"allowed", "seed, data"}});
    }
    if (key == "data" && entry.second.IsMap() && entry.second["remote"]) {
      throw ConfigError(std::string("config key 'data.remote' (") + kOrigin +
                            "): a data worker does not forward to other workers",
                        {{"problem", "not_forwarded"}});
    }
  }
  return complete_transforms(parse_config(text, kOrigin, {}));
}

void check_under_roots(const Config& config, const std::vector<std::string>& roots) {
  if (config.data.source == "synthetic") return;  // generated, reads no files
  namespace fs = std::filesystem;
  std::error_code error;
  const fs::path path = fs::weakly_canonical(config.data.path, error);
  if (!error) {
    for (const auto& root : roots) {
      const fs::path resolved_root = fs::weakly_canonical(root, error);
      if (!error && is_inside(path, resolved_root)) return;
    }
  }
  std::string listed;
  for (const auto& root : roots) listed += (listed.empty() ? "" : ", ") + root;
  throw DataError(
      "data.path '" + config.data.path + "' is outside this worker's data roots (" + listed + ")",
      {{"key", "data.path"},
       {"path", config.data.path},
       {"problem", "outside_roots"},
       {"allowed", listed}});
}

}  // namespace loom::data
