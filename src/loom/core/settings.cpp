#include "loom/core/settings.h"

#include <cstdlib>

#include "loom/core/error.h"

namespace loom {

const std::vector<SettingInfo>& all_settings() {
  static const std::vector<SettingInfo> settings = {
      {"LOOM_LOG_LEVEL", "info", "Least severe log level shown: debug, info, warn, error, off."},
      {"LOOM_FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist",
       "Default folder of the Fashion-MNIST IDX files (Debian package dataset-fashion-mnist)."},
      {"LOOM_FAULT_STOP_AFTER_STEP", "0",
       "Testing aid: stop training as if preempted right after the checkpoint of this step "
       "(0 = never)."},
      {"LOOM_FAULT_KILL_IN_SAVE", "0",
       "Testing aid: SIGKILL the process halfway through writing the checkpoint of this step "
       "(0 = never)."},
  };
  return settings;
}

static const SettingInfo& find_setting(std::string_view name) {
  for (const auto& s : all_settings()) {
    if (name == s.name) return s;
  }
  throw Error("settings: '" + std::string(name) + "' is not a declared LOOM_* setting");
}

std::string setting(std::string_view name) {
  const SettingInfo& info = find_setting(name);
  const char* value = std::getenv(info.name);
  return (value && *value) ? std::string(value) : std::string(info.default_value);
}

long long setting_int(std::string_view name) {
  std::string text = setting(name);
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0') {
    throw ConfigError("environment variable " + std::string(name) + ": expected an integer, got '" +
                      text + "'");
  }
  return v;
}

}  // namespace loom
