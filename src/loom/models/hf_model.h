// A Hugging Face model folder (config.json beside model.safetensors, or beside a sharded
// model.safetensors.index.json) as the zoo sees it: which family it is, the shape config.json
// gives, and what its tensors are called in Loom. The GPT-2 family (GPT2LMHeadModel) and the Llama
// family (LlamaForCausalLM) are named as Loom names its own, less a "transformer." or "model."
// prefix; GPT-2 stores its four projections' weights transposed (its Conv1D keeps [in, out]).
// Reading the tensors themselves is train/pretrained.h's.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "loom/models/gpt.h"
#include "loom/models/llama.h"

namespace loom::models {

struct HfModel {
  std::string dir;
  std::string family;  // Loom's model.name: "gpt" or "llama"
  GptConfig gpt;       // family "gpt"
  LlamaConfig llama;   // family "llama"

  int64_t vocab() const { return family == "gpt" ? gpt.vocab : llama.vocab; }
  // The most positions the model was made for (GPT-2's n_positions, the Llama's
  // max_position_embeddings).
  int64_t context() const { return family == "gpt" ? gpt.seq_len : llama.seq_len; }
};

// Reads DIR/config.json. Throws ConfigError naming model.pretrained (fields: path, and hf_key
// with value for a setting) for a folder without one, a model type Loom does not build (fields
// problem "model_type"), or a setting its build of the family does not have (biases in a Llama,
// another activation: problem "unsupported").
HfModel read_hf_config(const std::string& dir);

// The name in Loom's model of the folder's tensor `hf_name`: "" for one Loom does not keep (a
// tied head's copy of the token embedding, GPT-2's stored attention masks, rotary frequencies),
// nullopt for a name the family does not have.
std::optional<std::string> loom_tensor_name(const HfModel& model, const std::string& hf_name);

// Whether the folder stores Loom's tensor `name` transposed (GPT-2's Conv1D weights).
bool stored_transposed(const HfModel& model, const std::string& name);

// The folder's name of Loom's tensor `name` (loom_tensor_name's inverse).
std::string hf_tensor_name(const HfModel& model, const std::string& name);

// The model model.name and its shape keys describe, for token data of `vocab` ids in windows of
// `seq_len` (0: the preset's context): model.pretrained's folder where set (dir is then that
// folder), else the preset with its sizes (dir "").
HfModel hf_model_of(const ModelConfig& config, int64_t vocab, int64_t seq_len);

// config.json for the shape, as transformers writes one for LlamaForCausalLM or
// GPT2LMHeadModel (fp32 weights).
std::string hf_config_json(const HfModel& model);

}  // namespace loom::models
