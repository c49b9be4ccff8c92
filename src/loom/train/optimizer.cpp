#include "loom/train/optimizer.h"

#include <c10/util/StringUtil.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <algorithm>
#include <map>

#include "loom/core/error.h"
#include "loom/train/fused_adam.h"
#include "loom/train/fused_sgd.h"

namespace loom::train {
namespace {

// The tensors the optimizer steps. A frozen one (the base of a LoRA fine-tune) stays in its
// groups but never has a gradient, so no state is made for it: the optimizers step and keep
// state only for tensors with a gradient.
std::vector<at::Tensor> values(const models::NamedTensors& named) {
  std::vector<at::Tensor> out;
  for (const auto& [name, t] : named) out.push_back(t);
  return out;
}

// LibTorch keys optimizer state by the parameter's TensorImpl address.
void* state_key(const at::Tensor& p) { return p.unsafeGetTensorImpl(); }

constexpr const char* kStep = "step";

template <typename AdamState>
void export_adam(const AdamState& s, const std::string& name, models::NamedTensors& out) {
  out.emplace_back(optimizer_state_name(name, kStep), at::scalar_tensor(s.step(), at::kLong));
  out.emplace_back(optimizer_state_name(name, "exp_avg"), s.exp_avg());
  out.emplace_back(optimizer_state_name(name, "exp_avg_sq"), s.exp_avg_sq());
}

class StateLookup {
 public:
  explicit StateLookup(const models::NamedTensors& state) {
    for (const auto& [name, t] : state) map_[name] = t;
  }
  bool has(const std::string& key) const { return map_.count(key) > 0; }
  at::Tensor get(const std::string& key, const at::Tensor& like) const {
    auto it = map_.find(key);
    if (it == map_.end()) throw Error("checkpoint: optimizer state '" + key + "' is missing");
    if (like.defined() && it->second.sizes() != like.sizes()) {
      throw Error("checkpoint: optimizer state '" + key + "' has shape " +
                  c10::str(it->second.sizes()) + ", expected " + c10::str(like.sizes()));
    }
    if (!like.defined()) return it->second.clone();
    // A private copy (state is updated in place, so aliasing the source would corrupt it) in
    // the parameter's layout: channels_last weights have channels_last moments.
    return it->second.to(like.options(), /*non_blocking=*/false, /*copy=*/true)
        .contiguous(like.suggest_memory_format());
  }

 private:
  std::map<std::string, at::Tensor> map_;
};

template <typename AdamState>
std::unique_ptr<AdamState> import_adam(const StateLookup& lookup, const std::string& name,
                                       const at::Tensor& p) {
  auto s = std::make_unique<AdamState>();
  s->step(lookup.get(optimizer_state_name(name, kStep), at::Tensor()).template item<int64_t>());
  s->exp_avg(lookup.get(optimizer_state_name(name, "exp_avg"), p));
  s->exp_avg_sq(lookup.get(optimizer_state_name(name, "exp_avg_sq"), p));
  return s;
}

}  // namespace

const std::vector<std::string>& optimizer_kinds() {
  static const std::vector<std::string> kinds = {"sgd", "adam", "adamw"};
  return kinds;
}

const std::vector<std::string>& optimizer_state_fields(const std::string& kind) {
  static const std::vector<std::string> sgd = {"momentum_buffer"};
  static const std::vector<std::string> adam = {kStep, "exp_avg", "exp_avg_sq"};
  if (kind == "sgd") return sgd;
  if (kind == "adam" || kind == "adamw") return adam;
  throw ConfigError("config key 'optimizer.name': unknown optimizer '" + kind +
                    "' (expected sgd, adam or adamw)");
}

std::string optimizer_state_name(const std::string& parameter, const std::string& field) {
  return parameter + "." + field;
}

models::NamedTensors name_optimizer_state(const std::string& kind, const ParameterStates& state) {
  const std::vector<std::string>& fields = optimizer_state_fields(kind);
  models::NamedTensors named;
  for (const auto& [parameter, by_field] : state) {
    for (const auto& [field, value] : by_field) {
      if (std::find(fields.begin(), fields.end(), field) == fields.end()) {
        throw ConfigError("optimizer: the state of '" + parameter + "' has a field '" + field +
                          "', which checkpoints of " + kind + " do not keep (they keep " +
                          c10::Join(", ", fields) + ")");
      }
      // Loom counts steps in an int64, whatever type the optimizer kept them in.
      named.emplace_back(
          optimizer_state_name(parameter, field),
          field == kStep ? at::scalar_tensor(value.item<double>(), at::kLong) : value);
    }
  }
  return named;
}

ParameterStates split_optimizer_state(const std::string& kind, const models::NamedTensors& state) {
  const std::vector<std::string>& fields = optimizer_state_fields(kind);
  ParameterStates split;
  std::map<std::string, size_t> index;  // parameter -> its place in `split`
  for (const auto& [name, tensor] : state) {
    const size_t dot = name.rfind('.');
    const std::string field = dot == std::string::npos ? "" : name.substr(dot + 1);
    if (dot == std::string::npos ||
        std::find(fields.begin(), fields.end(), field) == fields.end()) {
      throw DataError("checkpoint: optimizer state '" + name + "' is not named <parameter>." +
                      "<field> for a field of " + kind + " (" + c10::Join(", ", fields) + ")");
    }
    const std::string parameter = name.substr(0, dot);
    auto [it, added] = index.emplace(parameter, split.size());
    if (added) split.emplace_back(parameter, FieldState{});
    split[it->second].second.emplace_back(field, tensor);
  }
  return split;
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const OptimizerConfig& c,
                                                        const models::NamedTensors& parameters) {
  if (c.name == "sgd") {
    return std::make_unique<FusedSGD>(values(parameters),
                                      torch::optim::SGDOptions(c.lr)
                                          .momentum(c.momentum)
                                          .nesterov(c.nesterov && c.momentum > 0)
                                          .weight_decay(c.weight_decay));
  }
  if (c.name == "adam") {
    return std::make_unique<FusedAdam>(values(parameters), torch::optim::AdamOptions(c.lr)
                                                               .betas({c.beta1, c.beta2})
                                                               .eps(c.eps)
                                                               .weight_decay(c.weight_decay));
  }
  if (c.name == "adamw") {
    return std::make_unique<FusedAdamW>(values(parameters), torch::optim::AdamWOptions(c.lr)
                                                                .betas({c.beta1, c.beta2})
                                                                .eps(c.eps)
                                                                .weight_decay(c.weight_decay));
  }
  throw ConfigError("config key 'optimizer.name': unknown optimizer '" + c.name + "'");
}

void set_learning_rate(torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) group.options().set_lr(lr);
}

models::NamedTensors export_optimizer_state(torch::optim::Optimizer& optimizer,
                                            const std::string& kind,
                                            const models::NamedTensors& parameters) {
  models::NamedTensors out;
  auto& state = optimizer.state();
  for (const auto& [name, p] : parameters) {
    auto it = state.find(state_key(p));
    if (it == state.end()) continue;
    if (kind == "sgd") {
      const auto& s = static_cast<const torch::optim::SGDParamState&>(*it->second);
      if (s.momentum_buffer().defined())
        out.emplace_back(optimizer_state_name(name, "momentum_buffer"), s.momentum_buffer());
    } else if (kind == "adam") {
      export_adam(static_cast<const torch::optim::AdamParamState&>(*it->second), name, out);
    } else if (kind == "adamw") {
      export_adam(static_cast<const torch::optim::AdamWParamState&>(*it->second), name, out);
    }
  }
  return out;
}

void import_optimizer_state(torch::optim::Optimizer& optimizer, const std::string& kind,
                            const models::NamedTensors& parameters,
                            const models::NamedTensors& saved) {
  StateLookup lookup(saved);
  auto& state = optimizer.state();
  state.clear();
  for (const auto& [name, p] : parameters) {
    std::unique_ptr<torch::optim::OptimizerParamState> s;
    if (kind == "sgd") {
      const std::string momentum = optimizer_state_name(name, "momentum_buffer");
      if (!lookup.has(momentum)) continue;
      auto sgd = std::make_unique<torch::optim::SGDParamState>();
      sgd->momentum_buffer(lookup.get(momentum, p));
      s = std::move(sgd);
    } else if (kind == "adam") {
      if (!lookup.has(optimizer_state_name(name, kStep))) continue;
      s = import_adam<torch::optim::AdamParamState>(lookup, name, p);
    } else if (kind == "adamw") {
      if (!lookup.has(optimizer_state_name(name, kStep))) continue;
      s = import_adam<torch::optim::AdamWParamState>(lookup, name, p);
    }
    state[state_key(p)] = std::move(s);
  }
}

}  // namespace loom::train
