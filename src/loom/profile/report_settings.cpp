#include "loom/profile/report_settings.h"

#include <yaml-cpp/yaml.h>

#include <map>

#include "loom/core/error.h"

namespace loom::profile {

namespace {

// Image sources, by how their samples are held: in memory (IDX files, generated) or encoded
// files decoded on the loader's threads.
const std::vector<std::string> kInMemory = {"fashion_mnist", "idx", "synthetic"};
const std::vector<std::string> kEncoded = {"image_folder", "tar_shards"};

std::vector<std::string> joined(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

// Who reads what, as models::make_model, data::make_loaders and the token windows do (and as
// config_schema.cpp's help says: "cnn: ...", "synthetic", ...). Only keys whose reader is
// clear are listed: a key left out is shown for every run.
const std::vector<KeyScope>& key_scopes() {
  static const std::vector<KeyScope> scopes = [] {
    const std::vector<std::string> images = joined(kInMemory, kEncoded);
    const std::vector<std::string> files = {"fashion_mnist", "idx", "image_folder", "tar_shards",
                                            "tokens"};
    return std::vector<KeyScope>{
        {"model.torchscript", "model.name", {"torchscript"}},
        {"model.width", "model.name", {"cnn"}},
        {"model.depth", "model.name", {"cnn"}},
        {"model.dropout", "model.name", {"mlp", "cnn"}},
        {"model.patch_size", "model.name", {"vit_tiny"}},
        {"model.gpt", "model.name", {"gpt"}},
        {"model.llama", "model.name", {"llama"}},
        {"model.pretrained", "model.name", {"gpt", "llama"}},
        {"data.path", "data.source", files},
        {"data.seq_len", "data.source", {"tokens"}},
        {"data.val_path", "data.source", kEncoded},
        {"data.augment", "data.source", kInMemory},
        {"data.transforms", "data.source", images},
        {"data.eval_transforms", "data.source", images},
        {"data.image_size", "data.source", joined({"synthetic"}, kEncoded)},
        {"data.channels", "data.source", {"synthetic"}},
        {"data.classes", "data.source", {"synthetic"}},
        {"data.train_samples", "data.source", {"synthetic"}},
        {"data.test_samples", "data.source", {"synthetic"}},
        {"data.max_pixels", "data.source", kEncoded},
        {"data.bad_samples", "data.source", kEncoded},
        {"data.max_bad_fraction", "data.source", kEncoded},
        {"parallel.ps", "parallel.mode", {"ps"}},
    };
  }();
  return scopes;
}

namespace {

bool covers(const std::string& keys, const std::string& key) {
  return key == keys || (key.size() > keys.size() && key.compare(0, keys.size(), keys) == 0 &&
                         key[keys.size()] == '.');
}

std::string flow_yaml(const YAML::Node& node) {
  YAML::Emitter out;
  out.SetMapFormat(YAML::Flow);
  out.SetSeqFormat(YAML::Flow);
  out << node;
  return out.c_str();
}

// Maps become dotted keys; scalars, lists and empty maps are values.
void flatten(const YAML::Node& node, const std::string& prefix, std::vector<ConfigSetting>& out) {
  if (node.IsMap() && node.size() > 0) {
    for (const auto& entry : node) {
      const std::string name = entry.first.as<std::string>();
      flatten(entry.second, prefix.empty() ? name : prefix + "." + name, out);
    }
    return;
  }
  if (node.IsScalar()) {
    out.push_back({prefix, node.Scalar().empty() ? "\"\"" : node.Scalar()});
  } else {
    out.push_back({prefix, flow_yaml(node)});
  }
}

}  // namespace

RunSettings run_settings(const std::string& config_yaml) {
  YAML::Node root;
  try {
    root = YAML::Load(config_yaml);
  } catch (const YAML::Exception& e) {
    throw Error("report: config.yaml is not YAML: " + std::string(e.what()));
  }
  std::vector<ConfigSetting> all;
  if (root.IsMap()) flatten(root, "", all);
  std::map<std::string, std::string> value_of;
  for (const ConfigSetting& s : all) value_of[s.key] = s.value;

  RunSettings settings;
  for (ConfigSetting& s : all) {
    bool applies = true;
    for (const KeyScope& scope : key_scopes()) {
      if (!covers(scope.keys, s.key)) continue;
      const auto selected = value_of.find(scope.selector);
      if (selected == value_of.end()) continue;
      bool listed = false;
      for (const std::string& v : scope.values) listed = listed || v == selected->second;
      applies = applies && listed;
    }
    if (applies) {
      settings.shown.push_back(std::move(s));
    } else {
      settings.hidden.push_back(s.key);
    }
  }
  return settings;
}

}  // namespace loom::profile
