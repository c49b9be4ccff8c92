// The registry of every LOOM_* environment setting. Each one is declared once, in settings.cpp,
// with its default and a one-line description; docs/settings.md lists the same table.
// Reading an undeclared name is a programming error and throws.
#pragma once

#include <string>
#include <string_view>
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

}  // namespace loom
