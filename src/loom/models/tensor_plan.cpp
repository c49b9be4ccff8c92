#include "loom/models/tensor_plan.h"

#include <fnmatch.h>

#include <numeric>

#include "loom/core/error.h"
#include "loom/core/text.h"
#include "loom/models/model.h"
#include "loom/models/planned_layers.h"

namespace loom::models {
namespace {

using Kind = TensorStyle::Kind;

struct PlannedModule {
  std::string name;
  TensorStyle style;
  PlannedLayer* layer;
};

ConfigError plan_error(const std::string& pattern, const std::string& why) {
  return ConfigError::at_key("parallel.tensor", "the tensor plan's '" + pattern + "': " + why,
                             {{"pattern", pattern}});
}

// The modules of `root` the plan names, in the module's order, each with its style. Throws
// ConfigError for a pattern that names nothing, a module named twice or one the style does not
// fit: a plan is the model's, so these are its writer's mistakes, said at once.
std::vector<PlannedModule> planned_modules(torch::nn::Module& root, const TensorPlan& plan) {
  std::vector<PlannedModule> out;
  std::vector<bool> used(plan.styles.size(), false);
  for (const auto& item : root.named_modules("", /*include_self=*/false)) {
    const std::string& name = item.key();
    const std::pair<std::string, TensorStyle>* chosen = nullptr;
    for (std::size_t i = 0; i < plan.styles.size(); ++i) {
      const auto& [pattern, style] = plan.styles[i];
      if (!name_matches(pattern, name)) continue;
      if (chosen) {
        throw plan_error(pattern, "'" + name + "' is planned already, by '" + chosen->first + "'");
      }
      chosen = &plan.styles[i];
      used[i] = true;
    }
    if (!chosen) continue;
    auto* layer = dynamic_cast<PlannedLayer*>(item.value().get());
    if (!layer || !layer->takes(chosen->second)) {
      throw plan_error(chosen->first,
                       "'" + name + "' does not take the style " + chosen->second.describe());
    }
    out.push_back({name, chosen->second, layer});
  }
  for (std::size_t i = 0; i < plan.styles.size(); ++i) {
    if (!used[i]) throw plan_error(plan.styles[i].first, "no module of the model is named so");
  }
  return out;
}

// Every divisor that applies checked against `ranks`: the ones for parallel.tensor first.
void check_divisors(const TensorPlan& plan, int64_t ranks, bool sequence) {
  int64_t allowed = 0;  // what every applicable count divides by
  for (const TensorDivisor& d : plan.divisors) {
    if (!d.with_sequence || sequence) allowed = std::gcd(allowed, d.count);
  }
  for (const bool with_sequence : {false, true}) {
    for (const TensorDivisor& d : plan.divisors) {
      if (d.with_sequence != with_sequence || (with_sequence && !sequence)) continue;
      if (d.count % ranks == 0) continue;
      const std::string may = divisors_in_words(allowed);
      ErrorFields fields = {{"value", std::to_string(ranks)}, {"allowed", may}};
      if (!d.count_key.empty()) fields["count_key"] = d.count_key;
      throw ConfigError::at_key(with_sequence ? "parallel.tensor_sequence" : "parallel.tensor",
                                std::to_string(ranks) + " ranks (parallel.tensor) do not split " +
                                    d.what + "; parallel.tensor may be " + may,
                                std::move(fields));
    }
  }
}

}  // namespace

std::string TensorStyle::describe() const {
  switch (kind) {
    case Kind::kColwise:
      return sections == 1 ? "colwise" : "colwise(sections=" + std::to_string(sections) + ")";
    case Kind::kRowwise:
      return "rowwise";
    case Kind::kVocabulary:
      return "vocabulary";
    case Kind::kSequence:
      return "sequence";
  }
  return "";
}

bool TensorPlan::splits_sequence() const {
  for (const auto& [pattern, style] : styles) {
    if (style.kind == Kind::kSequence) return true;
  }
  return false;
}

int64_t TensorPlan::splits_by() const {
  int64_t by = 0;
  for (const TensorDivisor& d : divisors) {
    if (!d.with_sequence) by = std::gcd(by, d.count);
  }
  return by;
}

bool name_matches(const std::string& pattern, const std::string& name) {
  return fnmatch(pattern.c_str(), name.c_str(), 0) == 0;
}

namespace {

// A layer's cuts, by its own parameters' names, added to `splits` under the model's names.
void add_cuts(const std::string& layer, const TensorSplits& cuts, TensorSplits& splits) {
  for (const auto& [parameter, split] : cuts) splits[layer + "." + parameter] = split;
}

}  // namespace

TensorSplits planned_splits(torch::nn::Module& root, const TensorPlan& plan, int64_t ranks) {
  TensorSplits splits;
  for (const PlannedModule& planned : planned_modules(root, plan)) {
    add_cuts(planned.name, planned.layer->cuts(planned.style, ranks), splits);
  }
  return splits;
}

AppliedTensorPlan apply_tensor_plan(Model& model, TensorGroup& group) {
  const TensorPlan plan = model.tensor_plan();
  torch::nn::Module* root = model.modules();
  const int64_t ranks = group.size();
  if (plan.empty() || !root) {
    throw ConfigError::at_key("parallel.tensor",
                              "the model '" + model.name() + "' has no tensor-parallel plan",
                              {{"value", std::to_string(ranks)}});
  }
  const bool sequence = group.splits_sequence();
  if (sequence && !plan.splits_sequence()) {
    throw ConfigError::at_key("parallel.tensor_sequence", "the model '" + model.name() +
                                                              "' has no sequence split in its "
                                                              "tensor-parallel plan");
  }
  check_divisors(plan, ranks, sequence);
  AppliedTensorPlan applied;
  applied.plan = plan;
  for (const PlannedModule& planned : planned_modules(*root, plan)) {
    const TensorSplits cut = planned.layer->take(planned.style, group);
    add_cuts(planned.name, cut, applied.splits);
    if (planned.name == plan.output && !cut.empty()) applied.output_split = true;
  }
  return applied;
}

int64_t planned_split_parameter_count(Model& model, int64_t ranks) {
  const TensorPlan plan = model.tensor_plan();
  torch::nn::Module* root = model.modules();
  if (plan.empty() || !root) return 0;
  const TensorSplits splits = planned_splits(*root, plan, ranks);
  int64_t count = 0;
  for (const auto& [name, tensor] : model.named_parameters()) {
    if (splits.count(name)) count += tensor.numel();
  }
  return count;
}

}  // namespace loom::models
