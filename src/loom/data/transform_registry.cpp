#include "loom/data/transform_registry.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "loom/core/error.h"
#include "loom/core/text.h"
#include "loom/data/gaussian_blur.h"
#include "loom/data/transforms.h"

namespace loom::data {
namespace {

using Kind = TransformStep::Kind;

std::string values_text(const std::vector<double>& values) {
  if (values.size() == 1) return format_number(values[0]);
  std::string s = "[";
  for (size_t i = 0; i < values.size(); ++i) s += (i ? ", " : "") + format_number(values[i]);
  return s + "]";
}

// A range parameter must be given [low, high].
void check_ordered(const TransformConfig& t, const std::string& key, const char* param) {
  const auto& v = t.params.at(param);
  if (v.size() == 2 && v[0] > v[1]) {
    throw ConfigError("config key '" + key + "." + param + "': give [low, high], got " +
                      values_text(v));
  }
}

// `size` or `kernel`: one number for a square, or [height, width].
std::pair<int, int> size_param(const TransformConfig& t, const char* name) {
  const auto& v = t.params.at(name);
  return {static_cast<int>(v[0]), static_cast<int>(v.size() > 1 ? v[1] : v[0])};
}

TransformStep window_step(Kind kind, const TransformConfig& t) {
  TransformStep s;
  s.kind = kind;
  std::tie(s.height, s.width) = size_param(t, "size");
  return s;
}

const TransformParam kSize{"size", 1, 2, {}, true, 1, "output side, or [height, width]"};

}  // namespace

const std::vector<TransformSpec>& transform_registry() {
  static const std::vector<TransformSpec> registry = {
      {"random_resized_crop",
       {kSize,
        {"scale", 2, 2, {0.08, 1.0}, false, 1e-6, "range of the crop's share of the image area"},
        {"ratio", 2, 2, {3.0 / 4.0, 4.0 / 3.0}, false, 1e-6, "range of width / height"}},
       "A random crop of random area and aspect ratio, resized to `size` (torchvision's "
       "RandomResizedCrop). First in a list, only the crop window is decoded.",
       [](const TransformConfig& t, const std::string& key) {
         check_ordered(t, key, "scale");
         check_ordered(t, key, "ratio");
         if (t.params.at("scale")[1] > 1.0) {
           throw ConfigError("config key '" + key + ".scale': the area fraction must be <= 1");
         }
       },
       [](const TransformConfig& t) {
         TransformStep s = window_step(Kind::kRandomResizedCrop, t);
         const auto& scale = t.params.at("scale");
         const auto& ratio = t.params.at("ratio");
         s.crop = {scale[0], scale[1], ratio[0], ratio[1]};
         return s;
       }},
      {"resize",
       {{"size",
         1,
         2,
         {},
         true,
         1,
         "one number: the shorter side (aspect kept); two: [height, width]"}},
       "Bilinear resize (torchvision's Resize without antialiasing).",
       nullptr,
       [](const TransformConfig& t) {
         TransformStep s;
         s.kind = Kind::kResize;
         const auto& size = t.params.at("size");
         s.height = static_cast<int>(size[0]);
         s.width = size.size() > 1 ? static_cast<int>(size[1]) : 0;  // 0: shorter side
         return s;
       }},
      {"center_crop",
       {kSize},
       "The central window; zero padding where it is larger than the image.",
       nullptr,
       [](const TransformConfig& t) { return window_step(Kind::kCenterCrop, t); }},
      {"random_crop",
       {kSize, {"padding", 1, 1, {0}, true, 0, "zero border added on every side first"}},
       "A window at a uniformly random position, after zero padding (torchvision's RandomCrop; "
       "with padding it is a random shift).",
       nullptr,
       [](const TransformConfig& t) {
         TransformStep s = window_step(Kind::kRandomCrop, t);
         s.padding = static_cast<int>(t.params.at("padding")[0]);
         return s;
       }},
      {"random_horizontal_flip",
       {{"p", 1, 1, {0.5}, false, 0, "probability of flipping"}},
       "Mirror left to right with probability p.",
       [](const TransformConfig& t, const std::string& key) {
         if (t.params.at("p")[0] > 1.0) {
           throw ConfigError("config key '" + key + ".p': a probability must be <= 1");
         }
       },
       [](const TransformConfig& t) {
         TransformStep s;
         s.p = t.params.at("p")[0];
         s.apply = [](const TransformStep& step, at::Tensor image, KeyedRng& rng) {
           if (rng.uniform() < step.p) flip_horizontal(image);
         };
         return s;
       }},
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
       "torchvision's gaussian_blur (16-bit fixed point: AVX-512, AVX2 or portable vectors).",
       [](const TransformConfig& t, const std::string& key) {
         check_ordered(t, key, "sigma");
         for (double k : t.params.at("kernel")) {
           if (static_cast<int64_t>(k) % 2 == 0) {
             throw ConfigError("config key '" + key + ".kernel': sizes must be odd, got " +
                               values_text(t.params.at("kernel")));
           }
         }
       },
       [](const TransformConfig& t) {
         TransformStep s;
         std::tie(s.kernel_height, s.kernel_width) = size_param(t, "kernel");
         s.sigma_min = t.params.at("sigma").front();
         s.sigma_max = t.params.at("sigma").back();
         s.apply = [](const TransformStep& step, at::Tensor image, KeyedRng& rng) {
           const double sigma = step.sigma_min + (step.sigma_max - step.sigma_min) * rng.uniform();
           gaussian_blur(image, step.kernel_height, step.kernel_width, sigma);
         };
         return s;
       }},
      {"normalize",
       {{"mean", 1, 4, {}, false, 0, "per channel, in [0, 1] pixel units"},
        {"std", 1, 4, {}, false, 1e-6, "per channel"}},
       "Per-channel (x - mean) / std, applied by the feeder during its one conversion pass. "
       "Must come last. Without it: ImageNet's statistics for image folders and tar shards, "
       "the training set's own for IDX data.",
       [](const TransformConfig& t, const std::string& key) {
         if (t.params.at("mean").size() != t.params.at("std").size()) {
           throw ConfigError("config key '" + key + "': mean has " +
                             std::to_string(t.params.at("mean").size()) + " values, std has " +
                             std::to_string(t.params.at("std").size()));
         }
       },
       nullptr},
  };
  return registry;
}

const TransformSpec* find_transform(const std::string& name) {
  for (const auto& spec : transform_registry()) {
    if (name == spec.name) return &spec;
  }
  return nullptr;
}

namespace {

// Checks one parameter's values: how many, whole numbers, the lower bound.
void check_values(const TransformParam& p, const std::vector<double>& v, const std::string& key) {
  if (static_cast<int>(v.size()) < p.min_values || static_cast<int>(v.size()) > p.max_values) {
    throw ConfigError(key + ": expected " +
                      (p.min_values == p.max_values
                           ? std::to_string(p.min_values)
                           : std::to_string(p.min_values) + " to " + std::to_string(p.max_values)) +
                      " number(s), got " + std::to_string(v.size()));
  }
  for (double x : v) {
    if (!std::isfinite(x) || x < p.min) {
      throw ConfigError(key + ": must be >= " + format_number(p.min) + ", got " + format_number(x));
    }
    if (p.integer && x != std::floor(x)) {
      throw ConfigError(key + ": must be a whole number, got " + format_number(x));
    }
  }
}

void complete(TransformConfig& t, const std::string& key) {
  const TransformSpec* spec = find_transform(t.name);
  if (!spec) {
    std::vector<std::string> names;
    for (const auto& s : transform_registry()) names.push_back(s.name);
    const std::string hint = closest_match(t.name, names);
    ErrorFields fields = {
        {"problem", "unknown_transform"}, {"value", t.name}, {"allowed", join_alternatives(names)}};
    if (!hint.empty()) fields["suggestion"] = hint;
    throw ConfigError::at_key(key,
                              "unknown transform '" + t.name + "'" +
                                  (hint.empty() ? "" : "; did you mean '" + hint + "'?") +
                                  " (known: " + join_alternatives(names) + ")",
                              std::move(fields));
  }
  if (!t.value.empty()) {  // `name: VALUE` sets the first parameter
    t.params[spec->params.front().name] = std::move(t.value);
    t.value.clear();
  }
  std::vector<std::string> param_names;
  for (const auto& p : spec->params) param_names.push_back(p.name);
  for (const auto& [name, values] : t.params) {
    if (std::find(param_names.begin(), param_names.end(), name) == param_names.end()) {
      const std::string hint = closest_match(name, param_names);
      ErrorFields fields = {{"problem", "unknown_parameter"},
                            {"value", name},
                            {"allowed", join_alternatives(param_names)}};
      if (!hint.empty()) fields["suggestion"] = hint;
      throw ConfigError::at_key(key,
                                t.name + " has no parameter '" + name + "'" +
                                    (hint.empty() ? "" : "; did you mean '" + hint + "'?"),
                                std::move(fields));
    }
  }
  for (const auto& p : spec->params) {
    auto it = t.params.find(p.name);
    if (it != t.params.end()) {
      check_values(p, it->second, "config key '" + key + "." + p.name + "'");
    } else if (p.defaults.empty()) {
      throw ConfigError("config key '" + key + "': " + t.name + " needs '" + p.name + "' (" +
                        p.help + ")");
    } else {
      t.params[p.name] = p.defaults;
    }
  }
  if (spec->check) spec->check(t, key);
}

void complete_list(std::vector<TransformConfig>& list, const char* key) {
  for (size_t i = 0; i < list.size(); ++i) {
    complete_transform(list[i], std::string(key) + "[" + std::to_string(i) + "]");
  }
}

}  // namespace

void complete_transform(TransformConfig& t, const std::string& key) {
  try {
    complete(t, key);
  } catch (const ConfigError& e) {
    if (t.origin.empty()) throw;
    throw ConfigError(std::string(e.what()) + " (" + t.origin + ")");
  }
}

Config complete_transforms(Config config) {
  complete_list(config.data.transforms, "data.transforms");
  complete_list(config.data.eval_transforms, "data.eval_transforms");
  return config;
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

}  // namespace loom::data
