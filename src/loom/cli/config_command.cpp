// `loom config`: the resolved configuration (defaults + file + --set), the reference of every
// key, or the LOOM_* environment settings, as a user would want to check them before a run.
#include <cstdio>
#include <string>
#include <vector>

#include "loom/cli/commands.h"
#include "loom/core/config.h"
#include "loom/core/settings.h"
#include "loom/data/transform_registry.h"

namespace loom::cli {
namespace {

struct ConfigArgs {
  std::vector<std::string> config_paths;
  std::vector<std::string> overrides;
  bool reference = false;
  bool settings = false;
  bool json = false;
};

int print_reference() {
  std::printf("| key | type | default | description |\n|---|---|---|---|\n");
  for (const auto& row : describe_config()) {
    std::printf("| `%s` | %s | `%s` | %s |\n", row.key.c_str(), row.type.c_str(),
                row.default_value.c_str(), row.help.c_str());
  }
  std::printf(
      "\n## Transforms\n\n"
      "`data.transforms` and `data.eval_transforms` are lists run in order on uint8 pixels. An "
      "entry is a name (`random_horizontal_flip`), a name with the value of its first parameter "
      "(`center_crop: 224`), or a name with a mapping (`gaussian_blur: {kernel: 11, sigma: "
      "[0.1, 2.0]}`). Sizes are `[height, width]` or one number for a square. Random choices are "
      "keyed by (seed, epoch, sample), so they do not depend on the number of loader threads.\n\n"
      "| transform | parameter | default | meaning |\n|---|---|---|---|\n");
  for (const auto& spec : data::transform_registry()) {
    std::printf("| `%s` | | | %s |\n", spec.name, spec.help);
    for (const auto& p : spec.params) {
      std::string value = "required";
      if (!p.defaults.empty()) {
        TransformConfig probe{spec.name, {{p.name, p.defaults}}};
        value = data::describe_transform(probe);
        value = "`" + value.substr(value.find('=') + 1, value.size() - value.find('=') - 2) + "`";
      }
      std::printf("| | `%s` | %s | %s |\n", p.name, value.c_str(), p.help);
    }
  }
  return 0;
}

int print_settings() {
  std::printf("| variable | default | description |\n|---|---|---|\n");
  for (const auto& s : all_settings()) {
    std::printf("| `%s` | `%s` | %s |\n", s.name, s.default_value, s.description);
  }
  return 0;
}

}  // namespace

Command add_config_command(CLI::App& app) {
  auto args = std::make_shared<ConfigArgs>();
  CLI::App* sub = app.add_subcommand("config", "Print the resolved configuration or its reference");
  sub->add_option(
      "config", args->config_paths,
      "YAML configuration files; a key in a later one replaces the same key in an earlier one");
  add_set_option(sub, args->overrides);
  sub->add_flag("--reference", args->reference, "Print every key as a Markdown table");
  sub->add_flag("--settings", args->settings, "Print the LOOM_* environment settings");
  sub->add_flag("--json", args->json,
                "Print the resolved configuration as one JSON object (nested like the YAML)");
  return {sub, [args] {
            if (args->reference) return print_reference();
            if (args->settings) return print_settings();
            const Config config = load_run_config(args->config_paths, args->overrides);
            if (args->json) {
              std::printf("%s\n", config_to_json(config).c_str());
            } else {
              std::fputs(config_to_yaml(config).c_str(), stdout);
            }
            return 0;
          }};
}

}  // namespace loom::cli
