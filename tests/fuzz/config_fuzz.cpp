// Configuration text as `loom train` reads it: a YAML document, then --set overrides. Input: the
// YAML, and after a line "--set" one override per line, with the transform lists completed by
// the data layer's registry as every command does. Every mistake must be a ConfigError; a
// configuration that parses must print and parse back to the same configuration.
#include "fuzz_target.h"
#include "loom/core/config.h"
#include "loom/core/error.h"
#include "loom/data/transform_registry.h"

LOOM_FUZZ_TARGET(config) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const std::string marker = "\n--set\n";
  const auto split = input.find(marker);
  const std::string yaml = input.substr(0, split);
  std::vector<std::string> overrides;
  if (split != std::string::npos) {
    std::size_t at = split + marker.size();
    while (at <= input.size()) {
      const auto end = input.find('\n', at);
      overrides.push_back(
          input.substr(at, end == std::string::npos ? std::string::npos : end - at));
      if (end == std::string::npos) break;
      at = end + 1;
    }
  }
  try {
    const loom::Config config =
        loom::data::complete_transforms(loom::parse_config(yaml, "fuzz.yaml", overrides));
    const std::string printed = loom::config_to_yaml(config);
    const loom::Config again =
        loom::data::complete_transforms(loom::parse_config(printed, "printed.yaml", {}));
    if (loom::config_to_yaml(again) != printed) {
      loom::fuzz::broken("a parsed configuration does not print and parse back to itself");
    }
  } catch (const loom::ConfigError&) {
  }
}
