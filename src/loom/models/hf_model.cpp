#include "loom/models/hf_model.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "loom/core/error.h"
#include "loom/core/text.h"

namespace loom::models {
namespace {

using Json = nlohmann::json;

// Reads config.json's settings, naming the folder and the setting in every refusal.
class HfSettings {
 public:
  HfSettings(std::string dir, Json json) : dir_(std::move(dir)), json_(std::move(json)) {}

  bool has(const std::string& key) const { return json_.contains(key) && !json_[key].is_null(); }
  const Json& at(const std::string& key) const { return json_.at(key); }

  int64_t count(const std::string& key) const {
    if (!has(key) || !json_[key].is_number_integer() || json_[key].get<int64_t>() < 1) {
      throw refused(key, has(key) ? json_[key].dump() : "missing", "a count of at least 1");
    }
    return json_[key].get<int64_t>();
  }
  int64_t count(const std::string& key, int64_t otherwise) const {
    return has(key) ? count(key) : otherwise;
  }
  double number(const std::string& key, double otherwise) const {
    if (!has(key)) return otherwise;
    if (!json_[key].is_number()) throw refused(key, json_[key].dump(), "a number");
    return json_[key].get<double>();
  }
  bool flag(const std::string& key, bool otherwise) const {
    if (!has(key)) return otherwise;
    if (!json_[key].is_boolean()) throw refused(key, json_[key].dump(), "true or false");
    return json_[key].get<bool>();
  }
  // A setting Loom's build of the family has only at `expected`.
  template <typename T>
  void require(const std::string& key, const T& expected) const {
    if (has(key) && json_[key] != Json(expected)) {
      throw refused(key, json_[key].dump(), Json(expected).dump(), "unsupported");
    }
  }

  ConfigError refused(const std::string& key, const std::string& value, const std::string& expected,
                      const std::string& problem = "value") const {
    return ConfigError::at_key(
        "model.pretrained",
        "'" + dir_ + "/config.json' has " + key + " " + value + "; Loom builds it with " + expected,
        {{"path", dir_},
         {"hf_key", key},
         {"value", value},
         {"expected", expected},
         {"problem", problem}});
  }

 private:
  std::string dir_;
  Json json_;
};

GptConfig gpt_of(const HfSettings& s) {
  GptConfig c;
  c.n_layer = s.count("n_layer");
  c.n_head = s.count("n_head");
  c.n_embd = s.count("n_embd");
  c.seq_len = s.count("n_positions");
  c.vocab = s.count("vocab_size");
  c.dropout = 0;  // a fine-tune's choice (model.gpt.dropout), not the checkpoint's
  if (s.count("n_inner", 4 * c.n_embd) != 4 * c.n_embd) {
    throw s.refused("n_inner", s.at("n_inner").dump(), std::to_string(4 * c.n_embd), "unsupported");
  }
  const std::string activation =
      s.has("activation_function") ? s.at("activation_function").get<std::string>() : "gelu_new";
  if (activation != "gelu_new" && activation != "gelu") {
    throw s.refused("activation_function", activation, "\"gelu_new\" or \"gelu\"", "unsupported");
  }
  c.tanh_gelu = activation == "gelu_new";
  s.require("layer_norm_epsilon", 1e-5);
  s.require("scale_attn_weights", true);
  s.require("scale_attn_by_inverse_layer_idx", false);
  s.require("reorder_and_upcast_attn", false);
  s.require("tie_word_embeddings", true);
  return c;
}

LlamaConfig llama_of(const HfSettings& s) {
  LlamaConfig c;
  c.n_layer = s.count("num_hidden_layers");
  c.n_head = s.count("num_attention_heads");
  c.n_kv_head = s.count("num_key_value_heads", c.n_head);
  c.n_embd = s.count("hidden_size");
  c.hidden = s.count("intermediate_size");
  c.seq_len = s.count("max_position_embeddings");
  c.vocab = s.count("vocab_size");
  c.norm_eps = s.number("rms_norm_eps", 1e-6);
  c.tie_embeddings = s.flag("tie_word_embeddings", false);
  if (c.n_embd % c.n_head == 0 && s.count("head_dim", c.n_embd / c.n_head) != c.n_embd / c.n_head) {
    throw s.refused("head_dim", s.at("head_dim").dump(), std::to_string(c.n_embd / c.n_head),
                    "unsupported");
  }
  s.require("hidden_act", "silu");
  s.require("attention_bias", false);
  s.require("mlp_bias", false);
  // Transformers 5 keeps theta and the scaling in rope_parameters; earlier versions (and the
  // published Llama 3 folders) in rope_theta and rope_scaling.
  const Json rope = s.has("rope_parameters") ? s.at("rope_parameters")
                    : s.has("rope_scaling")  ? s.at("rope_scaling")
                                             : Json::object();
  c.rope_theta = rope.contains("rope_theta") ? rope["rope_theta"].get<double>()
                                             : s.number("rope_theta", 10000);
  const std::string type = rope.contains("rope_type") ? rope["rope_type"].get<std::string>()
                           : rope.contains("type")    ? rope["type"].get<std::string>()
                                                      : "default";
  if (type == "llama3") {
    c.rope_scaling.factor = rope.at("factor").get<double>();
    c.rope_scaling.low_freq_factor = rope.at("low_freq_factor").get<double>();
    c.rope_scaling.high_freq_factor = rope.at("high_freq_factor").get<double>();
    c.rope_scaling.original_context = rope.at("original_max_position_embeddings").get<int64_t>();
  } else if (type != "default") {
    throw s.refused("rope_type", "\"" + type + "\"", "\"default\" or \"llama3\"", "unsupported");
  }
  return c;
}

}  // namespace

HfModel read_hf_config(const std::string& dir) {
  const std::string path = dir + "/config.json";
  std::ifstream in(path);
  if (!in) {
    throw ConfigError::at_key("model.pretrained",
                              "no config.json in '" + dir + "' (a Hugging Face model folder)",
                              {{"path", dir}, {"problem", "no_config"}});
  }
  Json json;
  try {
    json = Json::parse(in);
  } catch (const Json::exception& e) {
    throw ConfigError::at_key("model.pretrained", "'" + path + "' is not JSON: " + e.what(),
                              {{"path", dir}, {"problem", "not_json"}});
  }
  const HfSettings settings(dir, json);
  HfModel model;
  model.dir = dir;
  const std::string type =
      settings.has("model_type") ? settings.at("model_type").get<std::string>() : "";
  try {
    if (type == "gpt2") {
      model.family = "gpt";
      model.gpt = gpt_of(settings);
    } else if (type == "llama") {
      model.family = "llama";
      model.llama = llama_of(settings);
    } else {
      throw settings.refused("model_type", "\"" + type + "\"", "\"gpt2\" or \"llama\"",
                             "model_type");
    }
  } catch (const Json::exception& e) {
    throw ConfigError::at_key("model.pretrained", "'" + path + "': " + e.what(),
                              {{"path", dir}, {"problem", "value"}});
  }
  return model;
}

std::optional<std::string> loom_tensor_name(const HfModel& model, const std::string& hf_name) {
  std::string name = hf_name;
  if (model.family == "gpt") {
    if (starts_with(name, "transformer.")) name = name.substr(12);
    // GPT2LMHeadModel's head is the token embedding; older folders also stored each layer's
    // causal mask.
    if (name == "lm_head.weight" || ends_with(name, ".attn.bias") ||
        ends_with(name, ".attn.masked_bias")) {
      return std::string();
    }
    if (name == "wte.weight" || name == "wpe.weight" || starts_with(name, "h.") ||
        starts_with(name, "ln_f.")) {
      return name;
    }
    return std::nullopt;
  }
  if (name == "lm_head.weight") {
    return model.llama.tie_embeddings ? std::string() : name;
  }
  if (!starts_with(name, "model.")) return std::nullopt;
  name = name.substr(6);
  if (ends_with(name, ".rotary_emb.inv_freq")) return std::string();
  return name;
}

bool stored_transposed(const HfModel& model, const std::string& name) {
  if (model.family != "gpt" || !ends_with(name, ".weight")) return false;
  for (const char* conv : {".attn.c_attn.", ".attn.c_proj.", ".mlp.c_fc.", ".mlp.c_proj."}) {
    if (name.find(conv) != std::string::npos) return true;
  }
  return false;
}

std::string hf_tensor_name(const HfModel& model, const std::string& name) {
  if (model.family == "gpt") return "transformer." + name;
  return name == "lm_head.weight" ? name : "model." + name;
}

HfModel hf_model_of(const ModelConfig& config, int64_t vocab, int64_t seq_len) {
  if (!config.pretrained.empty()) return read_hf_config(config.pretrained);
  HfModel model;
  model.family = config.name;
  if (config.name == "gpt") {
    model.gpt = gpt_config(config.gpt, vocab, seq_len);
  } else if (config.name == "llama") {
    model.llama = llama_config(config.llama, vocab, seq_len);
  } else {
    throw ConfigError::at_key("model.name",
                              config.name + " has no Hugging Face form (gpt and llama do)",
                              {{"value", config.name}});
  }
  return model;
}

std::string hf_config_json(const HfModel& model) {
  Json json;
  if (model.family == "gpt") {
    const GptConfig& c = model.gpt;
    json = {{"architectures", {"GPT2LMHeadModel"}},
            {"model_type", "gpt2"},
            {"vocab_size", c.vocab},
            {"n_positions", c.seq_len},
            {"n_embd", c.n_embd},
            {"n_layer", c.n_layer},
            {"n_head", c.n_head},
            {"n_inner", nullptr},
            {"activation_function", c.tanh_gelu ? "gelu_new" : "gelu"},
            {"layer_norm_epsilon", 1e-5},
            {"embd_pdrop", c.dropout},
            {"attn_pdrop", c.dropout},
            {"resid_pdrop", c.dropout},
            {"scale_attn_weights", true},
            {"tie_word_embeddings", true},
            {"torch_dtype", "float32"}};
  } else {
    const LlamaConfig& c = model.llama;
    Json rope = {{"rope_type", c.rope_scaling.enabled() ? "llama3" : "default"}};
    if (c.rope_scaling.enabled()) {
      rope["factor"] = c.rope_scaling.factor;
      rope["low_freq_factor"] = c.rope_scaling.low_freq_factor;
      rope["high_freq_factor"] = c.rope_scaling.high_freq_factor;
      rope["original_max_position_embeddings"] = c.rope_scaling.original_context;
    }
    // The older form (rope_theta beside rope_scaling), which transformers 4 and 5 both read.
    json = {{"architectures", {"LlamaForCausalLM"}},
            {"model_type", "llama"},
            {"vocab_size", c.vocab},
            {"hidden_size", c.n_embd},
            {"intermediate_size", c.hidden},
            {"num_hidden_layers", c.n_layer},
            {"num_attention_heads", c.n_head},
            {"num_key_value_heads", c.n_kv_head},
            {"head_dim", c.n_embd / c.n_head},
            {"max_position_embeddings", c.seq_len},
            {"rms_norm_eps", c.norm_eps},
            {"rope_theta", c.rope_theta},
            {"hidden_act", "silu"},
            {"attention_bias", false},
            {"mlp_bias", false},
            {"tie_word_embeddings", c.tie_embeddings},
            {"torch_dtype", "float32"}};
    if (c.rope_scaling.enabled()) json["rope_scaling"] = rope;
  }
  return json.dump(2) + "\n";
}

}  // namespace loom::models
