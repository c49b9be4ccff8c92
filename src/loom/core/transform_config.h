// The transform lists of the configuration (data.transforms, data.eval_transforms): what a user
// may write, checked and completed with defaults here so that a bad list is a configuration error
// (exit 2, naming the entry) before any data is touched. The data layer turns a checked list into
// a TransformPipeline.
//
// In YAML a list entry is a name, or a one-key mapping from the name to its parameters, or to
// the value of its first parameter:
//   transforms: [random_resized_crop: 224, random_horizontal_flip,
//                {gaussian_blur: {kernel: 11, sigma: [0.1, 2.0]}}]
#pragma once

#include <map>
#include <string>
#include <vector>

namespace loom {

struct TransformConfig {
  std::string name;
  std::map<std::string, std::vector<double>> params;  // every parameter, defaults filled in
  bool operator==(const TransformConfig& o) const { return name == o.name && params == o.params; }
};

struct TransformParam {
  const char* name;
  int min_values, max_values;    // how many numbers it takes
  std::vector<double> defaults;  // empty: required
  bool integer;
  double min;  // each number must be >= min
  const char* help;
};

struct TransformKind {
  const char* name;
  std::vector<TransformParam> params;  // the first is what `name: VALUE` sets
  const char* help;
};

// Every transform a list may name, in documentation order.
const std::vector<TransformKind>& transform_catalog();

// Checks a user's entry against the catalog and fills in defaults. `where` names the entry in
// messages ("data.transforms[2] (in run.yaml)"). Throws ConfigError.
void complete_transform(TransformConfig& t, const std::string& where);

// "random_resized_crop(size=224, scale=[0.08, 1])" for messages and summaries.
std::string describe_transform(const TransformConfig& t);

}  // namespace loom
