// One entry of a transform list (data.transforms, data.eval_transforms) as the configuration
// holds it. The reader here only takes the entry apart; which transforms exist, their parameters
// and defaults are the data layer's registry (data/transform_registry.h), whose
// complete_transforms() checks every entry and fills in its defaults.
//
// In YAML a list entry is a name, or a one-key mapping from the name to its parameters, or to
// the value of its first parameter:
//   transforms: [random_resized_crop: 224, random_horizontal_flip,
//                {gaussian_blur: {kernel: 11, sigma: [0.1, 2.0]}}]
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace loom {

struct TransformConfig {
  TransformConfig() = default;
  TransformConfig(std::string name, std::map<std::string, std::vector<double>> params = {})
      : name(std::move(name)), params(std::move(params)) {}

  std::string name;
  // Parameters by name; once completed, every parameter with defaults filled in.
  std::map<std::string, std::vector<double>> params;
  // `name: VALUE` as written, before completion moves it to the first parameter.
  std::vector<double> value;
  // Where the entry was written ("in run.yaml", "from --set"), for messages.
  std::string origin;

  bool operator==(const TransformConfig& o) const {
    return name == o.name && params == o.params && value == o.value;
  }
};

}  // namespace loom
