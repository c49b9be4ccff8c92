#include "loom/profile/report_settings.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "loom/core/config.h"
#include "loom/core/error.h"

namespace loom::profile {
namespace {

bool has(const std::vector<std::string>& keys, const std::string& key) {
  return std::find(keys.begin(), keys.end(), key) != keys.end();
}

std::vector<std::string> shown_keys(const RunSettings& s) {
  std::vector<std::string> keys;
  for (const auto& setting : s.shown) keys.push_back(setting.key);
  return keys;
}

// A GPT on token data: the CNN's keys and the image sources' are left out, the GPT's and the
// token source's kept, and keys no scope names are kept for every run.
TEST(ReportSettings, AGptRunHidesTheCnnsAndTheImageSourcesKeys) {
  const RunSettings s = run_settings(
      "seed: 0\n"
      "model: {name: gpt, torchscript: '', width: 32, depth: 1, dropout: 0.25, patch_size: 16,\n"
      "        gpt: {preset: gpt_tiny, n_layer: 2, dropout: 0}}\n"
      "data: {source: tokens, path: /tok, seq_len: 32, channels: 3, augment: false,\n"
      "       transforms: [], max_pixels: 100}\n"
      "parallel: {mode: data, zero: 1, ps: {servers: 1}}\n");
  const auto shown = shown_keys(s);
  for (const char* key :
       {"seed", "model.name", "model.gpt.preset", "model.gpt.n_layer", "model.gpt.dropout",
        "data.source", "data.path", "data.seq_len", "parallel.mode", "parallel.zero"}) {
    EXPECT_TRUE(has(shown, key)) << key;
  }
  EXPECT_EQ(s.hidden, (std::vector<std::string>{"model.torchscript", "model.width", "model.depth",
                                                "model.dropout", "model.patch_size",
                                                "data.channels", "data.augment", "data.transforms",
                                                "data.max_pixels", "parallel.ps.servers"}));
}

// A CNN on synthetic data keeps its own keys; a list is one value, written as flow YAML.
TEST(ReportSettings, ACnnRunKeepsItsKeysAndWritesAListAsOneValue) {
  const RunSettings s = run_settings(
      "model: {name: cnn, width: 32, dropout: 0.25, gpt: {n_layer: 0}}\n"
      "data: {source: synthetic, path: '', channels: 3,\n"
      "       transforms: [{name: resize, size: 8}]}\n");
  std::map<std::string, std::string> shown;
  for (const auto& setting : s.shown) shown[setting.key] = setting.value;
  EXPECT_EQ(shown["model.width"], "32");
  EXPECT_EQ(shown["model.dropout"], "0.25");
  EXPECT_EQ(shown["data.channels"], "3");
  EXPECT_EQ(shown["data.transforms"], "[{name: resize, size: 8}]");
  EXPECT_EQ(s.hidden, (std::vector<std::string>{"model.gpt.n_layer", "data.path"}));
}

// A file without the selector (an older run's) hides nothing; no file shows nothing.
TEST(ReportSettings, WithoutItsSelectorNothingIsHidden) {
  const RunSettings s = run_settings("model: {width: 32, dropout: 0.25}\n");
  EXPECT_EQ(shown_keys(s), (std::vector<std::string>{"model.width", "model.dropout"}));
  EXPECT_TRUE(s.hidden.empty());
  EXPECT_TRUE(run_settings("").shown.empty());
  EXPECT_THROW(run_settings("model: [unclosed"), Error);
}

// The table stays true to the configuration: each scope names configuration keys, and each of
// its selector's values is one the selector may take.
TEST(ReportSettings, EveryScopeNamesRealKeysAndValues) {
  std::map<std::string, std::string> type_of;
  for (const ConfigKeyDoc& doc : describe_config()) type_of[doc.key] = doc.type;
  for (const KeyScope& scope : key_scopes()) {
    const bool named = std::any_of(type_of.begin(), type_of.end(), [&](const auto& entry) {
      return entry.first == scope.keys || entry.first.rfind(scope.keys + ".", 0) == 0;
    });
    EXPECT_TRUE(named) << scope.keys;
    ASSERT_EQ(type_of.count(scope.selector), 1u) << scope.selector;
    const std::string options = " " + type_of[scope.selector] + " ";
    for (const std::string& value : scope.values) {
      EXPECT_NE(options.find(" " + value + " "), std::string::npos)
          << scope.keys << ": " << scope.selector << " has no value '" << value << "' (" << options
          << ")";
    }
  }
}

}  // namespace
}  // namespace loom::profile
