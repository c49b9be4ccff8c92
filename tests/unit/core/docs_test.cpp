// docs/ lists every configuration key and every environment setting: the docs are generated from
// the same schema, and this keeps a new key from landing undocumented.
#include <gtest/gtest.h>

#include "loom/core/config.h"
#include "loom/core/settings.h"
#include "loom/data/transform_registry.h"
#include "tools/test_support.h"

namespace loom {
namespace {

TEST(Docs, ConfigurationReferenceListsEveryKey) {
  const std::string doc = test::read_text(test::source_dir() + "/docs/configuration.md");
  ASSERT_FALSE(doc.empty());
  for (const auto& row : describe_config()) {
    EXPECT_NE(doc.find("| `" + row.key + "` | " + row.type + " | `" + row.default_value + "` |"),
              std::string::npos)
        << row.key << " is missing or stale: regenerate with `loom config --reference`";
  }
  for (const auto& spec : data::transform_registry()) {
    EXPECT_NE(doc.find(std::string("| `") + spec.name + "` | | | " + spec.help), std::string::npos)
        << "transform " << spec.name << " is missing or stale";
  }
}

TEST(Docs, SettingsReferenceListsEverySetting) {
  const std::string doc = test::read_text(test::source_dir() + "/docs/settings.md");
  for (const auto& s : all_settings()) {
    EXPECT_NE(doc.find(std::string("| `") + s.name + "` | `" + s.default_value + "` |"),
              std::string::npos)
        << s.name << " is missing or stale: regenerate with `loom config --settings`";
  }
}

}  // namespace
}  // namespace loom
