#include "loom/core/transform_config.h"

#include <algorithm>
#include <cmath>

#include "loom/core/error.h"
#include "loom/core/text.h"

namespace loom {
namespace {

std::string values_text(const std::vector<double>& values) {
  if (values.size() == 1) return format_number(values[0]);
  std::string s = "[";
  for (size_t i = 0; i < values.size(); ++i) s += (i ? ", " : "") + format_number(values[i]);
  return s + "]";
}

// Checks that only make sense for one transform: ranges given low-high, odd kernels.
void check_kind_rules(const TransformConfig& t, const std::string& where) {
  auto ordered = [&](const char* param) {
    const auto& v = t.params.at(param);
    if (v.size() == 2 && v[0] > v[1]) {
      throw ConfigError("config key '" + where + "." + param + "': give [low, high], got " +
                        values_text(v));
    }
  };
  if (t.name == "random_resized_crop") {
    ordered("scale");
    ordered("ratio");
    if (t.params.at("scale")[1] > 1.0) {
      throw ConfigError("config key '" + where + ".scale': the area fraction must be <= 1");
    }
  } else if (t.name == "gaussian_blur") {
    ordered("sigma");
    for (double k : t.params.at("kernel")) {
      if (static_cast<int64_t>(k) % 2 == 0) {
        throw ConfigError("config key '" + where + ".kernel': sizes must be odd, got " +
                          values_text(t.params.at("kernel")));
      }
    }
  } else if (t.name == "normalize") {
    if (t.params.at("mean").size() != t.params.at("std").size()) {
      throw ConfigError("config key '" + where + "': mean has " +
                        std::to_string(t.params.at("mean").size()) + " values, std has " +
                        std::to_string(t.params.at("std").size()));
    }
  } else if (t.name == "random_horizontal_flip" && t.params.at("p")[0] > 1.0) {
    throw ConfigError("config key '" + where + ".p': a probability must be <= 1");
  }
}

}  // namespace

const std::vector<TransformKind>& transform_catalog() {
  static const std::vector<TransformKind> catalog = {
      {"random_resized_crop",
       {{"size", 1, 2, {}, true, 1, "output side, or [height, width]"},
        {"scale", 2, 2, {0.08, 1.0}, false, 1e-6, "range of the crop's share of the image area"},
        {"ratio", 2, 2, {3.0 / 4.0, 4.0 / 3.0}, false, 1e-6, "range of width / height"}},
       "A random crop of random area and aspect ratio, resized to `size` (torchvision's "
       "RandomResizedCrop). First in a list, only the crop window is decoded."},
      {"resize",
       {{"size",
         1,
         2,
         {},
         true,
         1,
         "one number: the shorter side (aspect kept); two: [height, width]"}},
       "Bilinear resize (torchvision's Resize without antialiasing)."},
      {"center_crop",
       {{"size", 1, 2, {}, true, 1, "output side, or [height, width]"}},
       "The central window; zero padding where it is larger than the image."},
      {"random_crop",
       {{"size", 1, 2, {}, true, 1, "output side, or [height, width]"},
        {"padding", 1, 1, {0}, true, 0, "zero border added on every side first"}},
       "A window at a uniformly random position, after zero padding (torchvision's RandomCrop; "
       "with padding it is a random shift)."},
      {"random_horizontal_flip",
       {{"p", 1, 1, {0.5}, false, 0, "probability of flipping"}},
       "Mirror left to right with probability p."},
      {"gaussian_blur",
       {{"kernel", 1, 2, {}, true, 1, "odd kernel side, or [height, width]"},
        {"sigma",
         1,
         2,
         {0.1, 2.0},
         false,
         1e-6,
         "fixed sigma, or a [low, high] range drawn per image"}},
       "Gaussian blur of uint8 pixels with reflected borders, rounded once, within one level of "
       "torchvision's gaussian_blur (16-bit fixed point with AVX-512 where the CPU has it)."},
      {"normalize",
       {{"mean", 1, 4, {}, false, 0, "per channel, in [0, 1] pixel units"},
        {"std", 1, 4, {}, false, 1e-6, "per channel"}},
       "Per-channel (x - mean) / std, applied by the feeder during its one conversion pass. "
       "Must come last. Without it: ImageNet's statistics for image folders and tar shards, "
       "the training set's own for IDX data."},
  };
  return catalog;
}

void complete_transform(TransformConfig& t, const std::string& where) {
  const TransformKind* kind = nullptr;
  std::vector<std::string> names;
  for (const auto& k : transform_catalog()) {
    names.push_back(k.name);
    if (t.name == k.name) kind = &k;
  }
  if (!kind) {
    const std::string hint = closest_match(t.name, names);
    throw ConfigError("config key '" + where + "': unknown transform '" + t.name + "'" +
                      (hint.empty() ? "" : "; did you mean '" + hint + "'?") +
                      " (known: " + join_alternatives(names) + ")");
  }
  std::vector<std::string> param_names;
  for (const auto& p : kind->params) param_names.push_back(p.name);
  for (const auto& [name, values] : t.params) {
    if (std::find(param_names.begin(), param_names.end(), name) == param_names.end()) {
      const std::string hint = closest_match(name, param_names);
      throw ConfigError("config key '" + where + "': " + t.name + " has no parameter '" + name +
                        "'" + (hint.empty() ? "" : "; did you mean '" + hint + "'?"));
    }
  }
  for (const auto& p : kind->params) {
    auto it = t.params.find(p.name);
    if (it == t.params.end()) {
      if (p.defaults.empty()) {
        throw ConfigError("config key '" + where + "': " + t.name + " needs '" + p.name + "' (" +
                          p.help + ")");
      }
      t.params[p.name] = p.defaults;
      continue;
    }
    const std::vector<double>& v = it->second;
    const std::string key = "config key '" + where + "." + p.name + "'";
    if (static_cast<int>(v.size()) < p.min_values || static_cast<int>(v.size()) > p.max_values) {
      throw ConfigError(key + ": expected " +
                        (p.min_values == p.max_values ? std::to_string(p.min_values)
                                                      : std::to_string(p.min_values) + " to " +
                                                            std::to_string(p.max_values)) +
                        " number(s), got " + std::to_string(v.size()));
    }
    for (double x : v) {
      if (!std::isfinite(x) || x < p.min) {
        throw ConfigError(key + ": must be >= " + format_number(p.min) + ", got " +
                          format_number(x));
      }
      if (p.integer && x != std::floor(x)) {
        throw ConfigError(key + ": must be a whole number, got " + format_number(x));
      }
    }
  }
  check_kind_rules(t, where);
}

std::string describe_transform(const TransformConfig& t) {
  std::string s = t.name + "(";
  bool first = true;
  for (const auto& [name, values] : t.params) {
    s += (first ? "" : ", ") + name + "=" + values_text(values);
    first = false;
  }
  return s + ")";
}

}  // namespace loom
