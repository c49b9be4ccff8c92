#include "loom/core/config.h"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <tuple>

#include "loom/core/backend_spec.h"
#include "loom/core/device.h"
#include "loom/core/error.h"
#include "loom/core/settings.h"
#include "loom/core/text.h"

namespace loom {
namespace {

// `model: cnn` and `data: synthetic` are shorthand for the keys they most often set.
const std::map<std::string, std::string> kShorthands = {{"model", "model.name"},
                                                        {"data", "data.source"}};

struct FlatValue {
  YAML::Node node;
  std::string origin;  // "in FILE" or "from --set"
};
using FlatConfig = std::map<std::string, FlatValue>;

// Collects the known keys.
class KeyLister : public ConfigVisitor {
 public:
  std::vector<std::string> keys;
  void integer(const char* k, int64_t&, int64_t, const char*) override { keys.push_back(k); }
  void number(const char* k, double&, double, const char*) override { keys.push_back(k); }
  void boolean(const char* k, bool&, const char*) override { keys.push_back(k); }
  void text(const char* k, std::string&, const char*) override { keys.push_back(k); }
  void choice(const char* k, std::string&, const std::vector<std::string>&, const char*) override {
    keys.push_back(k);
  }
  void count_or_auto(const char* k, int64_t&, const char*) override { keys.push_back(k); }
  void text_list(const char* k, std::vector<std::string>&, const char*) override {
    keys.push_back(k);
  }
  void transforms(const char* k, std::vector<TransformConfig>&, const char*) override {
    keys.push_back(k);
  }
};

std::vector<std::string> known_keys() {
  Config scratch;
  KeyLister lister;
  visit_config(scratch, lister);
  return lister.keys;
}

[[noreturn]] void unknown_key(const std::string& key, const std::string& origin,
                              const std::vector<std::string>& known) {
  std::string message = "unknown config key '" + key + "' (" + origin + ")";
  std::string hint = closest_match(key, known);
  ErrorFields fields{{"key", key}, {"problem", "unknown_key"}};
  if (!hint.empty()) {
    message += "; did you mean '" + hint + "'?";
    fields["suggestion"] = hint;
  }
  throw ConfigError(message, std::move(fields));
}

bool is_section(const std::string& key, const std::vector<std::string>& known) {
  for (const auto& k : known) {
    if (k.rfind(key + ".", 0) == 0) return true;
  }
  return false;
}

// A mapping's key as text. YAML allows any node as a key (`[1]: x`, `{a: 1}: x`); a
// configuration names things, so anything but a scalar is a mistake in the file.
std::string key_text(const YAML::Node& key, const std::string& where) {
  if (!key.IsScalar()) {
    throw ConfigError("config " + where + ": a key must be a name, got " +
                      (key.IsSequence() ? "a list"
                       : key.IsMap()    ? "a mapping"
                                        : "nothing"));
  }
  return key.Scalar();
}

void flatten(const YAML::Node& node, const std::string& prefix, const std::string& origin,
             const std::vector<std::string>& known, FlatConfig& out) {
  for (const auto& entry : node) {
    std::string name = key_text(
        entry.first, prefix.empty() ? origin : "section '" + prefix + "' (" + origin + ")");
    std::string key = prefix.empty() ? name : prefix + "." + name;
    const YAML::Node& value = entry.second;
    bool is_known = std::find(known.begin(), known.end(), key) != known.end();
    auto shorthand = kShorthands.find(key);
    if (is_known) {
      out[key] = {value, origin};
    } else if (shorthand != kShorthands.end() && value.IsScalar()) {
      out[shorthand->second] = {value, origin};
    } else if (value.IsMap() && is_section(key, known)) {
      flatten(value, key, origin, known, out);
    } else if (is_section(key, known)) {
      throw ConfigError("config key '" + key + "' (" + origin +
                        ") is a section: give it a mapping of keys, not a value");
    } else {
      unknown_key(key, origin, known);
    }
  }
}

std::string describe_node(const YAML::Node& node) {
  if (node.IsScalar()) return "'" + node.Scalar() + "'";
  if (node.IsSequence()) return "a list";
  if (node.IsMap()) return "a mapping";
  return "nothing";
}

// Reads values from the flattened YAML into the Config, checking type and range.
class Reader : public ConfigVisitor {
 public:
  explicit Reader(const FlatConfig& flat) : flat_(flat) {}
  std::set<std::string> set_keys;

  void integer(const char* key, int64_t& value, int64_t min, const char*) override {
    if (const FlatValue* v = find(key)) {
      value = as_integer(key, *v);
      if (value < min) fail(key, *v, "must be >= " + std::to_string(min));
    }
  }
  void number(const char* key, double& value, double min, const char*) override {
    if (const FlatValue* v = find(key)) {
      value = convert<double>(key, *v, "a number");
      if (!std::isfinite(value)) fail(key, *v, "must be a finite number");
      if (value < min) fail(key, *v, "must be >= " + format_number(min));
    }
  }
  void boolean(const char* key, bool& value, const char*) override {
    if (const FlatValue* v = find(key)) value = convert<bool>(key, *v, "true or false");
  }
  void text(const char* key, std::string& value, const char*) override {
    if (const FlatValue* v = find(key)) value = convert<std::string>(key, *v, "a string");
  }
  void choice(const char* key, std::string& value, const std::vector<std::string>& options,
              const char*) override {
    const FlatValue* v = find(key);
    if (!v) return;
    std::string got = convert<std::string>(key, *v, "one of " + join_alternatives(options));
    if (std::find(options.begin(), options.end(), got) == options.end()) {
      std::string hint = closest_match(got, options);
      fail(key, *v,
           "expected one of " + join_alternatives(options) + ", got '" + got + "'" +
               (hint.empty() ? "" : " (did you mean '" + hint + "'?)"));
    }
    value = got;
  }
  void count_or_auto(const char* key, int64_t& value, const char*) override {
    const FlatValue* v = find(key);
    if (!v) return;
    if (v->node.IsScalar() && v->node.Scalar() == "auto") {
      value = 0;
      return;
    }
    value = as_integer(key, *v, "an integer >= 1 or 'auto'");
    if (value < 1)
      fail(key, *v, "expected an integer >= 1 or 'auto', got " + describe_node(v->node));
  }
  void text_list(const char* key, std::vector<std::string>& value, const char*) override {
    const FlatValue* v = find(key);
    if (!v) return;
    value.clear();
    if (v->node.IsSequence()) {
      for (const auto& item : v->node) {
        if (!item.IsScalar())
          fail(key, *v, "expected a list of strings, got a nested " + describe_node(item));
        value.push_back(item.Scalar());
      }
    } else if (v->node.IsScalar()) {  // "a,b,c", as --set gives it
      std::string item;
      for (char ch : v->node.Scalar() + ",") {
        if (ch != ',') {
          item += ch;
        } else if (!item.empty()) {
          value.push_back(item);
          item.clear();
        }
      }
    } else if (!v->node.IsNull()) {
      fail(key, *v, "expected a list of strings, got " + describe_node(v->node));
    }
  }
  void transforms(const char* key, std::vector<TransformConfig>& value, const char*) override {
    const FlatValue* v = find(key);
    if (!v) return;
    if (!v->node.IsSequence()) {
      fail(key, *v, "expected a list of transforms, got " + describe_node(v->node));
    }
    value.clear();
    for (size_t i = 0; i < v->node.size(); ++i) {
      const std::string where = std::string(key) + "[" + std::to_string(i) + "]";
      try {
        value.push_back(read_transform(v->node[i], where));
        value.back().origin = v->origin;
      } catch (const ConfigError& e) {
        throw ConfigError(std::string(e.what()) + " (" + v->origin + ")");
      }
    }
  }

 private:
  const FlatValue* find(const char* key) {
    auto it = flat_.find(key);
    if (it == flat_.end()) return nullptr;
    set_keys.insert(key);
    return &it->second;
  }

  [[noreturn]] static void fail(const std::string& key, const FlatValue& v,
                                const std::string& what) {
    throw ConfigError("config key '" + key + "' (" + v.origin + "): " + what);
  }

  template <typename T>
  static T convert(const std::string& key, const FlatValue& v, const std::string& expected) {
    if (v.node.IsScalar()) {
      try {
        return v.node.as<T>();
      } catch (const YAML::Exception&) {
      }
    }
    fail(key, v, "expected " + expected + ", got " + describe_node(v.node));
  }

  static int64_t as_integer(const std::string& key, const FlatValue& v,
                            const std::string& expected = "an integer") {
    return convert<int64_t>(key, v, expected);
  }

  // One list entry: `name`, `name: VALUE-OF-FIRST-PARAMETER` or `name: {param: value, ...}`.
  static TransformConfig read_transform(const YAML::Node& node, const std::string& where) {
    TransformConfig t;
    if (node.IsScalar()) {
      t.name = node.Scalar();
      return t;
    }
    if (!node.IsMap() || node.size() != 1) {
      throw ConfigError("config key '" + where +
                        "': expected a transform name or a one-key mapping name: parameters, "
                        "got " +
                        describe_node(node));
    }
    const auto entry = *node.begin();
    t.name = key_text(entry.first, "key '" + where + "'");
    const YAML::Node& body = entry.second;
    if (body.IsMap()) {
      for (const auto& param : body) {
        const std::string name = key_text(param.first, "key '" + where + "." + t.name + "'");
        t.params[name] = read_numbers(param.second, where + "." + name);
      }
    } else if (!body.IsNull()) {
      t.value = read_numbers(body, where);
    }
    return t;
  }

  static std::vector<double> read_numbers(const YAML::Node& node, const std::string& where) {
    std::vector<double> out;
    auto read_one = [&](const YAML::Node& n) {
      try {
        if (n.IsScalar()) return n.as<double>();
      } catch (const YAML::Exception&) {
      }
      throw ConfigError("config key '" + where + "': expected a number or a list of numbers, got " +
                        describe_node(n));
    };
    if (node.IsSequence()) {
      for (const auto& n : node) out.push_back(read_one(n));
    } else {
      out.push_back(read_one(node));
    }
    return out;
  }

  const FlatConfig& flat_;
};

// The shortest decimal text that reads back as the same double.
std::string shortest_double(double x) {
  char buf[40];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, x);
    if (std::strtod(buf, nullptr) == x) break;
  }
  std::string s = buf;
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";  // keep it a float in YAML
  return s;
}

// Writes every field, nested by the dots of its key, into YAML and JSON at once.
class Writer : public ConfigVisitor {
 public:
  YAML::Node yaml{YAML::NodeType::Map};
  nlohmann::json json = nlohmann::json::object();

  void integer(const char* k, int64_t& v, int64_t, const char*) override { put(k, v, v); }
  void number(const char* k, double& v, double, const char*) override {
    put(k, shortest_double(v), v);
  }
  void boolean(const char* k, bool& v, const char*) override { put(k, v, v); }
  void text(const char* k, std::string& v, const char*) override { put(k, v, v); }
  void choice(const char* k, std::string& v, const std::vector<std::string>&,
              const char*) override {
    put(k, v, v);
  }
  void count_or_auto(const char* k, int64_t& v, const char*) override {
    if (v == 0) {
      put(k, std::string("auto"), std::string("auto"));
    } else {
      put(k, v, v);
    }
  }
  // Each entry as `name: {param: value}`, one-number lists written as plain numbers.
  void text_list(const char* k, std::vector<std::string>& list, const char*) override {
    YAML::Node yaml_list(YAML::NodeType::Sequence);
    for (const auto& item : list) yaml_list.push_back(item);
    put(k, yaml_list, nlohmann::json(list));
  }
  void transforms(const char* k, std::vector<TransformConfig>& list, const char*) override {
    YAML::Node yaml_list(YAML::NodeType::Sequence);
    nlohmann::json json_list = nlohmann::json::array();
    // One number as itself, more as a list.
    auto numbers = [](const std::vector<double>& values) {
      YAML::Node yaml_values;
      nlohmann::json json_values = nlohmann::json::array();
      for (double x : values) {
        yaml_values.push_back(number_node(x));
        json_values.push_back(x);
      }
      if (values.size() == 1) return std::pair{number_node(values[0]), nlohmann::json(values[0])};
      return std::pair{yaml_values, json_values};
    };
    for (const auto& t : list) {
      // Completed: `name: {param: value}`; not yet: `name: VALUE` as written.
      YAML::Node body(YAML::NodeType::Map);
      nlohmann::json json_body = nlohmann::json::object();
      if (!t.value.empty()) {
        std::tie(body, json_body) = numbers(t.value);
      } else {
        for (const auto& [name, values] : t.params) {
          const auto [yaml_values, json_values] = numbers(values);
          body[name] = yaml_values;
          json_body[name] = json_values;
        }
      }
      YAML::Node entry(YAML::NodeType::Map);
      entry[t.name] = body;
      yaml_list.push_back(entry);
      json_list.push_back({{t.name, json_body}});
    }
    yaml_list.SetStyle(YAML::EmitterStyle::Flow);
    put(k, yaml_list, json_list);
  }

 private:
  static YAML::Node number_node(double x) {
    if (x == std::floor(x) && std::fabs(x) < 1e15) return YAML::Node(static_cast<int64_t>(x));
    return YAML::Node(shortest_double(x));
  }

  template <typename Y, typename J>
  void put(const std::string& key, const Y& yaml_value, const J& json_value) {
    std::vector<std::string> parts;
    std::stringstream ss(key);
    for (std::string part; std::getline(ss, part, '.');) parts.push_back(part);
    // yaml-cpp nodes are handles: walk down by reassigning copies of child handles.
    YAML::Node node = yaml;
    nlohmann::json* j = &json;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      node.reset(node[parts[i]]);
      j = &(*j)[parts[i]];
    }
    node[parts.back()] = yaml_value;
    (*j)[parts.back()] = json_value;
  }
};

// checkpoint.keep_best ranks evaluations: the run must evaluate, write checkpoints, and
// produce the metric (perplexity is a language model's).
void check_keep_best(const Config& c) {
  const std::string& metric = c.checkpoint.keep_best;
  if (metric == "none") return;
  const auto refuse = [&](const std::string& why) {
    throw ConfigError::at_key("checkpoint.keep_best", "'" + metric + "' " + why,
                              {{"value", metric}});
  };
  if (metric == "test_perplexity" && c.data.source != "tokens") {
    refuse(
        "is a language model's (data.source tokens); this run classifies images, whose "
        "evaluation gives test_loss and test_accuracy");
  }
  if (!c.train.eval) refuse("ranks evaluations, and train.eval is false");
  if (!c.checkpoint.enabled) refuse("keeps a checkpoint, and checkpoint.enabled is false");
  if ((c.data.source == "image_folder" || c.data.source == "tar_shards") &&
      c.data.val_path.empty()) {
    refuse("ranks evaluations, and " + c.data.source +
           " data is evaluated only with data.val_path, which is not set");
  }
}

void check_consistency(Config& c, const std::set<std::string>& set_keys) {
  if (!c.model.torchscript.empty()) {
    if (set_keys.count("model.name") && c.model.name != "torchscript") {
      throw ConfigError("config key 'model.name' is '" + c.model.name +
                        "' but model.torchscript is set; use one or the other");
    }
    c.model.name = "torchscript";
  } else if (c.model.name == "torchscript") {
    throw ConfigError(
        "config key 'model.torchscript': a path is required when model.name is "
        "torchscript");
  }
  // (Whether the model suits the data's task is models::make_model's check: a data-only user,
  // loom.data.Loader, names no model.)
  const bool tokens = c.data.source == "tokens";
  if (tokens && c.data.path.empty()) {
    throw ConfigError(
        "config key 'data.path': data.source tokens needs the folder `loom data tokenize` wrote");
  }
  if (tokens && c.train.label_smoothing > 0) {
    throw ConfigError("config key 'train.label_smoothing': applies to image classification");
  }
  check_keep_best(c);
  check_device_text(c.runtime.device, "runtime.device");
  parse_backend_spec(c.comm.backend, "comm.backend");
  for (const auto& worker : c.data.remote.workers) {
    const auto colon = worker.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == worker.size() ||
        worker.find_first_not_of("0123456789", colon + 1) != std::string::npos) {
      throw ConfigError("config key 'data.remote.workers': '" + worker + "' is not host:port");
    }
  }
  if (c.parallel.zero > 3) {
    throw ConfigError("config key 'parallel.zero': " + std::to_string(c.parallel.zero) +
                      " is not a ZeRO stage: 0 (nothing sharded), 1 (optimizer state), 2 "
                      "(optimizer state and gradients) or 3 (and the parameters)");
  }
  // (Whether the model has a tensor-parallel plan is the layout's check, once it is made.)
  if (c.parallel.tensor > 1) {
    if (c.parallel.parameter_servers()) {
      throw ConfigError(
          "config key 'parallel.tensor': tensor parallelism does not combine with parameter "
          "servers (parallel.mode: ps); it does with data parallelism, ZeRO and pipelines");
    }
  }
  if (c.parallel.tensor_sequence && c.parallel.tensor < 2) {
    throw ConfigError(
        "config key 'parallel.tensor_sequence': splits the sequence over a tensor group; set "
        "parallel.tensor to 2 or more");
  }
  if (c.parallel.memory_cap_mb > 0 && c.parallel.pipeline.stages > 1) {
    throw ConfigError(
        "config key 'parallel.memory_cap_mb': caps a rank that holds the whole model; a "
        "pipeline's stages have parallel.pipeline.memory_cap_mb");
  }
  if (c.parallel.zero == 3 && c.parallel.pipeline.stages > 1) {
    // A stage holds only its own blocks already; ZeRO-2 shards the rest of its memory.
    throw ConfigError(
        "config key 'parallel.zero': ZeRO-3 gathers every block's parameters on each "
        "data-parallel rank of the whole model; it does not combine with "
        "parallel.pipeline.stages > 1 (a stage holds only its own blocks: use parallel.zero: 2)");
  }
  if (c.parallel.zero > 0 && c.parallel.compression != "none") {
    throw ConfigError(
        "config key 'parallel.compression': ZeRO (parallel.zero) reduce-scatters "
        "the gradients as they are; compressed buckets do not combine with it");
  }
  if (c.parallel.zero > 0 && c.parallel.parameter_servers()) {
    throw ConfigError(
        "config key 'parallel.zero': sharding the optimizer state needs all-reduce data "
        "parallelism (parallel.mode: data, with or without pipeline stages), not parameter "
        "servers");
  }
  if (c.parallel.parameter_servers() && c.parallel.pipeline.stages > 1) {
    throw ConfigError(
        "config key 'parallel.mode': ps exchanges whole models' gradients; it does not combine "
        "with parallel.pipeline.stages > 1");
  }
  if (c.runtime.precision == "fp16" && c.parallel.parameter_servers()) {
    // A step whose gradients overflowed is skipped by every rank that steps together; servers
    // apply pushes as they arrive (asynchronous workers each on their own).
    throw ConfigError(
        "config key 'runtime.precision': fp16's loss scaling skips the steps whose gradients "
        "overflowed, which parameter servers (parallel.mode: ps) cannot; use bf16 or fp32");
  }
  const PsConfig& ps = c.parallel.ps;
  if (!c.parallel.parameter_servers() && (ps.mode != "sync" || ps.optimizer_on != "worker")) {
    throw ConfigError(std::string("config key '") +
                      (ps.mode != "sync" ? "parallel.ps.mode" : "parallel.ps.optimizer_on") +
                      "': parameter-server settings need parallel.mode: ps");
  }
  if (ps.staleness > 0 && ps.mode != "ssp") {
    throw ConfigError("config key 'parallel.ps.staleness': a bound of " +
                      std::to_string(ps.staleness) + " steps needs parallel.ps.mode: ssp, not " +
                      ps.mode);
  }
  if (c.parallel.parameter_servers() && (ps.mode != "sync" || ps.optimizer_on == "server") &&
      c.parallel.compression != "none") {
    throw ConfigError(
        "config key 'parallel.compression': servers that keep the parameters exchange them in "
        "float; compression applies to sync servers with the optimizer on the workers");
  }
  if (c.train.label_smoothing >= 1.0) {
    throw ConfigError("config key 'train.label_smoothing': must be < 1, got " +
                      shortest_double(c.train.label_smoothing));
  }
  for (auto [key, beta] : {std::pair{"optimizer.beta1", c.optimizer.beta1},
                           std::pair{"optimizer.beta2", c.optimizer.beta2}}) {
    if (beta >= 1.0) {
      throw ConfigError(std::string("config key '") + key + "': must be < 1, got " +
                        shortest_double(beta));
    }
  }
}

// One YAML text's keys into `flat`, over what earlier texts set.
void add_yaml(const std::string& yaml_text, const std::string& origin,
              const std::vector<std::string>& known, FlatConfig& flat) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    throw ConfigError("config " + origin + ": not valid YAML: " + e.what(),
                      {{"problem", "not_yaml"}, {"path", origin}});
  }
  if (root.IsMap()) {
    flatten(root, "", "in " + origin, known, flat);
  } else if (!root.IsNull()) {
    throw ConfigError("config " + origin + ": expected a mapping of keys at the top level");
  }
}

// `loom launch --servers K` tells its ranks the job's server count (LOOM_PS_SERVERS): it stands
// for parallel.mode=ps and parallel.ps.servers=K where no file or --set gives them, so that the
// launcher's flag alone is enough, and a file or --set that says otherwise is an error naming
// both.
void take_launcher_servers(FlatConfig& flat) {
  const long long servers = setting_int("LOOM_PS_SERVERS");
  if (servers <= 0) return;
  const std::string origin = "from loom launch --servers";
  flat.try_emplace("parallel.mode", FlatValue{YAML::Node("ps"), origin});
  flat.try_emplace("parallel.ps.servers", FlatValue{YAML::Node(servers), origin});
}

void check_launcher_servers(const Config& config, const FlatConfig& flat) {
  const long long servers = setting_int("LOOM_PS_SERVERS");
  if (servers <= 0) return;
  const std::string started = "loom launch --servers started " + std::to_string(servers) +
                              " parameter server(s) for this job";
  if (!config.parallel.parameter_servers()) {
    throw ConfigError("config key 'parallel.mode' is '" + config.parallel.mode + "' (" +
                      flat.at("parallel.mode").origin + "), but " + started +
                      "; set parallel.mode=ps or start no servers");
  }
  if (config.parallel.ps.servers != servers) {
    throw ConfigError("config key 'parallel.ps.servers' is " +
                      std::to_string(config.parallel.ps.servers) + " (" +
                      flat.at("parallel.ps.servers").origin + "), but " + started);
  }
}

// The overrides over `flat`, then defaults for the rest, validated.
Config resolve(FlatConfig& flat, const std::vector<std::string>& known,
               const std::vector<std::string>& overrides) {
  for (const auto& override_text : overrides) {
    auto eq = override_text.find('=');
    if (eq == std::string::npos || eq == 0) {
      throw ConfigError("--set expects key=value, got '" + override_text + "'");
    }
    std::string key = override_text.substr(0, eq);
    std::string value = override_text.substr(eq + 1);
    if (auto s = kShorthands.find(key); s != kShorthands.end()) key = s->second;
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      unknown_key(key, "from --set", known);
    }
    YAML::Node node;
    try {
      node = YAML::Load(value);
    } catch (const YAML::Exception&) {
      node = YAML::Node(value);
    }
    if (node.IsNull()) node = YAML::Node(value);
    flat[key] = {node, "from --set"};
  }
  take_launcher_servers(flat);
  Config config = default_config();
  Reader reader(flat);
  visit_config(config, reader);
  check_launcher_servers(config, flat);
  check_consistency(config, reader.set_keys);
  return config;
}

}  // namespace

Config parse_config(const std::string& yaml_text, const std::string& origin,
                    const std::vector<std::string>& overrides) {
  const std::vector<std::string> known = known_keys();
  FlatConfig flat;
  add_yaml(yaml_text, origin, known, flat);
  return resolve(flat, known, overrides);
}

Config load_config(const std::vector<std::string>& paths,
                   const std::vector<std::string>& overrides) {
  const std::vector<std::string> known = known_keys();
  FlatConfig flat;
  for (const auto& path : paths) {
    std::ifstream in(path);
    if (!in) throw ConfigError("config file '" + path + "' cannot be read (does it exist?)");
    std::stringstream text;
    text << in.rdbuf();
    add_yaml(text.str(), path, known, flat);
  }
  return resolve(flat, known, overrides);
}

std::string config_to_yaml(const Config& config) {
  Config copy = config;
  Writer writer;
  visit_config(copy, writer);
  YAML::Emitter out;
  out << writer.yaml;
  return std::string(out.c_str()) + "\n";
}

std::string config_to_json(const Config& config) {
  Config copy = config;
  Writer writer;
  visit_config(copy, writer);
  return writer.json.dump();
}

std::vector<ConfigKeyDoc> describe_config() {
  class Describer : public ConfigVisitor {
   public:
    std::vector<ConfigKeyDoc> rows;
    void integer(const char* k, int64_t& v, int64_t min, const char* h) override {
      rows.push_back({k, "integer >= " + std::to_string(min), std::to_string(v), h});
    }
    void number(const char* k, double& v, double, const char* h) override {
      rows.push_back({k, "number", shortest_double(v), h});
    }
    void boolean(const char* k, bool& v, const char* h) override {
      rows.push_back({k, "boolean", v ? "true" : "false", h});
    }
    void text(const char* k, std::string& v, const char* h) override {
      rows.push_back({k, "string", v.empty() ? "\"\"" : v, h});
    }
    void choice(const char* k, std::string& v, const std::vector<std::string>& options,
                const char* h) override {
      std::string type;
      for (const auto& o : options) type += (type.empty() ? "" : " \\| ") + o;
      rows.push_back({k, type, v, h});
    }
    void count_or_auto(const char* k, int64_t& v, const char* h) override {
      rows.push_back({k, "integer >= 1 \\| auto", v == 0 ? "auto" : std::to_string(v), h});
    }
    void text_list(const char* k, std::vector<std::string>& v, const char* h) override {
      std::string shown;
      for (const auto& item : v) shown += (shown.empty() ? "" : ", ") + item;
      rows.push_back({k, "list of strings", "[" + shown + "]", h});
    }
    void transforms(const char* k, std::vector<TransformConfig>& v, const char* h) override {
      rows.push_back({k, "list of transforms", v.empty() ? "[]" : "(set)", h});
    }
  };
  Config config = default_config();
  Describer describer;
  visit_config(config, describer);
  return describer.rows;
}

}  // namespace loom
