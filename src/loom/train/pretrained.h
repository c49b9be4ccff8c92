// A Hugging Face model folder's weights loaded into the model its config.json shaped (model.
// pretrained; models/hf_model.h names the tensors). Every rank loads the whole model before its
// layout is made, so tensor groups, pipeline stages and ZeRO's shards all start from the same
// whole tensors, cut as they would cut the model's own.
#pragma once

#include <string>

#include "loom/models/hf_model.h"
#include "loom/models/model.h"

namespace loom::train {

// Copies the tensors of the folder `dir` (model.safetensors, or the shards a
// model.safetensors.index.json lists) into `model`'s parameters, converted to their dtype.
// Throws DataError naming the file and tensor (fields: path, tensor, problem "unexpected",
// "shape" with value and expected, or "missing") for a tensor the model does not have, one of
// another shape, or a model tensor the folder lacks; ConfigError naming model.pretrained for a
// folder without weights.
void load_pretrained(const std::string& dir, models::Model& model);

// Writes `tensors` (a model's whole tensors under its own names, as checkpoints hold them) as
// the Hugging Face folder `dir` of the shape `shape`: config.json (a pretrained folder's own,
// else one made for the shape), model.safetensors under the folder's names (GPT-2's Conv1D
// weights transposed back), and a pretrained folder's tokenizer and generation files. Throws
// ConfigError naming --out where `dir` holds a model already.
void save_hf_folder(const std::string& dir, const models::HfModel& shape,
                    const models::NamedTensors& tensors);

// Writes the LoRA adapters among `tensors` as a PEFT adapter folder `dir` for the base model of
// the shape `shape` (adapter_config.json: r, lora_alpha, lora_dropout and the adapted linears'
// names; adapter_model.safetensors: "base_model.model.<linear>.lora_A.weight", ...), which
// peft's PeftModel.from_pretrained loads onto transformers' model. Throws ConfigError naming
// --out where `dir` holds an adapter already.
void save_peft_adapter(const std::string& dir, const models::HfModel& shape,
                       const models::NamedTensors& tensors, const LoraModelConfig& lora);

}  // namespace loom::train
