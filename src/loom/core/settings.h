// The registry of every LOOM_* environment setting. Each one is declared once, in settings.cpp,
// with its default and a one-line description; docs/settings.md lists the same table.
// Reading an undeclared name is a programming error and throws.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace loom {

struct SettingInfo {
  const char* name;
  const char* default_value;
  const char* description;
};

// Every declared setting, in a stable order.
const std::vector<SettingInfo>& all_settings();

// The value from the environment, or the declared default when unset or empty.
std::string setting(std::string_view name);

// The same, parsed as an integer; throws ConfigError naming the variable if it is not one.
long long setting_int(std::string_view name);

// A testing aid's "RANK:NUMBER" (LOOM_FAULT_SLOW_RANK and the like); nullopt when unset. Throws
// ConfigError naming the variable when it is not of that form.
std::optional<std::pair<int, long long>> setting_rank_and_number(std::string_view name);

}  // namespace loom
