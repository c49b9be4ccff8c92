// The configuration a run's report shows: config.yaml's keys, flattened to dotted names, without
// those the run never read. config.yaml holds every key (a GPT run's file has the CNN's
// model.width and model.dropout too); which ones a model or data source reads is written once,
// as data (key_scopes), not decided by the page.
#pragma once

#include <string>
#include <vector>

namespace loom::profile {

// Keys read only when the configuration's `selector` key holds one of `values`. `keys` is a
// key or a whole section ("model.gpt" covers model.gpt.n_layer, model.gpt.dropout, ...).
struct KeyScope {
  std::string keys;
  std::string selector;
  std::vector<std::string> values;
};

// The table: the keys of one model (model.name), one data source (data.source) or one layout
// mode (parallel.mode). A key with no entry applies to every run.
const std::vector<KeyScope>& key_scopes();

struct ConfigSetting {
  std::string key;    // "model.gpt.n_layer"
  std::string value;  // the scalar as written; a list or map as flow YAML
};

struct RunSettings {
  std::vector<ConfigSetting> shown;  // the keys that apply, in the file's order
  std::vector<std::string> hidden;   // the keys that do not
};

// `config_yaml` (a run's config.yaml) split by key_scopes(). A selector the file lacks hides
// nothing. Empty text gives nothing shown; text that is not YAML throws Error.
RunSettings run_settings(const std::string& config_yaml);

}  // namespace loom::profile
