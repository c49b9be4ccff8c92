// LoRA fine-tuning (Hu et al., 2021; Hugging Face PEFT's format): low-rank adapters on the
// linears a configuration names, every other parameter of the model frozen, so that a step
// computes gradients and keeps optimizer state for the adapters alone. Applied to the whole
// model before any layout is made, so the layouts take the adapters as parameters like any other
// (a tensor plan cuts them with their linear: planned_layers.h) and skip the frozen ones
// (no gradient buckets, no ZeRO shards of their state).
#pragma once

#include <string>
#include <vector>

#include "loom/core/config.h"
#include "loom/models/model.h"

namespace loom::models {

// Adds an adapter (model.lora: rank, alpha, dropout) to every linear of `model` whose name
// matches one of model.lora.targets, after freezing every parameter. Returns the adapted
// linears' names, in the model's order. Throws ConfigError naming model.lora.targets for no
// pattern, or a pattern that names no linear (its field: pattern), and model.lora.rank for a
// model that has no linears to adapt (not one of the zoo's language models).
std::vector<std::string> apply_lora(Model& model, const LoraModelConfig& config);
// The same on a network's modules (`what` names it in messages).
std::vector<std::string> apply_lora(torch::nn::Module& root, const LoraModelConfig& config,
                                    const std::string& what);

// The LoRA adapters' parameter names of a model ("<linear>.lora_A.weight", "...lora_B.weight").
bool is_lora_parameter(const std::string& name);

// `tensors` (a model's whole tensors under its names, adapters included) with every adapted
// linear's weight merged, W + (alpha / rank) B A, and the adapters left out: the plain model's.
NamedTensors merge_lora(const NamedTensors& tensors, const LoraModelConfig& config);

}  // namespace loom::models
