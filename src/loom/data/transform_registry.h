// Every image transform a list (data.transforms, data.eval_transforms) may name, in one registry:
// its name, its parameters with their ranges and defaults, its help text, and the constructor of
// the step the pipeline runs. Adding a transform is one entry in transform_registry.cpp (plus its
// kernel, when it is not a window move).
//
// The configuration reader (core/) keeps entries as written; complete_transforms() checks them
// here against the registry and fills in defaults, so a bad list is a configuration error (exit
// 2, naming the entry) before any data is touched.
#pragma once

#include <string>
#include <vector>

#include "loom/core/config.h"
#include "loom/data/transform_pipeline.h"

namespace loom::data {

struct TransformParam {
  const char* name;
  int min_values, max_values;    // how many numbers it takes
  std::vector<double> defaults;  // empty: required
  bool integer;
  double min;  // each number must be >= min
  const char* help;
};

struct TransformSpec {
  const char* name;
  std::vector<TransformParam> params;  // the first is what `name: VALUE` sets
  const char* help;
  // Rules that tie values together (ordered ranges, odd kernels). Throws ConfigError naming
  // `key`, the entry ("data.transforms[2]"). May be null.
  void (*check)(const TransformConfig& t, const std::string& key);
  // The step the pipeline runs, from a completed entry. Null for normalize, which is not a step:
  // the feeder applies it while converting the batch.
  TransformStep (*make)(const TransformConfig& t);
};

// Every transform, in documentation order.
const std::vector<TransformSpec>& transform_registry();

// The entry named `name`, or null.
const TransformSpec* find_transform(const std::string& name);

// Checks an entry against the registry and fills in defaults. `key` names the entry in messages
// ("data.transforms[2]"); the entry's origin ("in run.yaml") is appended. Throws ConfigError.
void complete_transform(TransformConfig& t, const std::string& key);

// A configuration read by core's parse_config / load_config with data.transforms and
// data.eval_transforms completed: what every command hands to the data layer. Throws
// ConfigError.
Config complete_transforms(Config config);

// "random_resized_crop(size=224, scale=[0.08, 1])" for messages and summaries.
std::string describe_transform(const TransformConfig& t);

}  // namespace loom::data
