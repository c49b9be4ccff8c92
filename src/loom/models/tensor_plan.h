// Tensor parallelism's plan for a model, kept beside the model rather than written into its
// layers, as torch's parallelize_module plans are (torchtitan's {"attention.wq":
// ColwiseParallel(), ...}): submodule name patterns (fnmatch's, as Python's TensorParallel takes
// them: `*` matches any run of characters, dots included) mapped to a style. The layers stay as
// readable as one process's (nanoGPT's); applying the plan cuts the weights of the modules it
// names and hands those modules the group, whose collectives they then run (planned_layers.h).
// Applied from parallel/ (TensorRanks, the pipeline planner's profile); a model without a plan
// has no tensor parallelism, which is what the layers above ask instead of checking zoo names.
//
// The styles are Megatron-LM's cuts (Shoeybi et al., 2019) and sequence parallelism's regions
// (Korthikanti et al., 2022), see tensor_parallel.h:
//   colwise(sections): a linear cut by its outputs, its input whole (or gathered by the
//     sequence); a fused weight of `sections` equal parts ([q | k | v]) cut part by part;
//   rowwise: a linear cut by its inputs, its partial products summed (or reduce-scattered by the
//     sequence), its bias whole and added after;
//   vocabulary: an embedding table cut by its rows (the vocabulary) where they divide over the
//     group, and whole otherwise; its attend() (a tied output head) then gives this rank's share
//     of the logits;
//   sequence: a module whose parameters stay whole but which, where the group splits the
//     sequence, runs on this rank's positions (a LayerNorm, a dropout, the position table).
#pragma once

#include <torch/nn/module.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "loom/models/tensor_parallel.h"

namespace loom::models {

class Model;  // model.h

struct TensorStyle {
  enum class Kind { kColwise, kRowwise, kVocabulary, kSequence };
  Kind kind = Kind::kColwise;
  int64_t sections = 1;  // colwise only

  // In the plan's words: "colwise", "colwise(sections=3)", "rowwise", "vocabulary", "sequence".
  std::string describe() const;
};

inline TensorStyle colwise(int64_t sections = 1) { return {TensorStyle::Kind::kColwise, sections}; }
inline TensorStyle rowwise() { return {TensorStyle::Kind::kRowwise}; }
inline TensorStyle vocabulary() { return {TensorStyle::Kind::kVocabulary}; }
inline TensorStyle sequence() { return {TensorStyle::Kind::kSequence}; }

// A count the group's size must divide for the plan to apply (a transformer's heads), in words
// for the error and under the key it is refused by.
struct TensorDivisor {
  int64_t count = 1;
  std::string what;  // "the GPT's 4 heads (model.gpt.n_head)"
  // Checked only where the group splits the sequence (a context's positions), refused under
  // parallel.tensor_sequence; otherwise under parallel.tensor.
  bool with_sequence = false;
  // The configuration key that sets the count ("model.llama.n_kv_head"), for the refusal's
  // fields (count_key); "" for a count no key sets.
  std::string count_key;
};

struct TensorPlan {
  std::vector<std::pair<std::string, TensorStyle>> styles;  // pattern -> style, in order
  std::vector<TensorDivisor> divisors;
  // The module whose cut decides whether the model's output is split (the vocabulary-cut
  // embedding whose attend() makes the logits); "" when the output is whole on every rank.
  std::string output;

  bool empty() const { return styles.empty(); }
  // What every group's size must divide, of the counts checked without the sequence (a
  // transformer's heads); 0 for none.
  int64_t splits_by() const;
  // Whether it says how to split the sequence (sequence styles), as parallel.tensor_sequence
  // needs.
  bool splits_sequence() const;
};

// What a plan made of a model on one rank.
struct AppliedTensorPlan {
  TensorPlan plan;            // the plan applied
  TensorSplits splits;        // each cut parameter, under its name in the model
  bool output_split = false;  // the output is this rank's share of its last dimension
};

// Whether `name` matches `pattern` (fnmatch's `*` and `?`, over the whole name).
bool name_matches(const std::string& pattern, const std::string& name);

// How the plan would cut the parameters of `root`'s modules over `ranks` ranks, by the
// parameters' names in `root` (nothing is changed). Throws ConfigError naming parallel.tensor for
// a pattern that names no module, or names one the style does not fit.
TensorSplits planned_splits(torch::nn::Module& root, const TensorPlan& plan, int64_t ranks);

// Splits `model` over `group` by its plan (Model::tensor_plan): checks that the group's size
// divides the plan's counts, cuts each planned module's weights to this rank's slices and hands
// it the group. Throws ConfigError naming parallel.tensor for a model without a plan or whose
// counts the size does not divide (its fields: value, allowed), and parallel.tensor_sequence
// for a group that splits the sequence where the plan cannot. `group` must outlive the model's
// use.
AppliedTensorPlan apply_tensor_plan(Model& model, TensorGroup& group);

// The parameters the plan cuts over `ranks` ranks, counted (for the advisor's estimate of what a
// tensor group would save); 0 for a model without a plan.
int64_t planned_split_parameter_count(Model& model, int64_t ranks);

}  // namespace loom::models
