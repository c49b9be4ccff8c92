#include "loom/parallel/ps/server_optimizer.h"

#include <ATen/ATen.h>

#include <map>

#include "loom/core/error.h"
#include "loom/parallel/ps/flat_layout.h"

namespace loom::parallel::ps {
namespace {

bool counts_steps(const OptimizerConfig& config) { return config.name != "sgd"; }

std::string part_name(std::size_t i) { return "part" + std::to_string(i); }

class OptimizerUpdate : public ServerUpdate {
 public:
  explicit OptimizerUpdate(RunOptimizer optimizer)
      : run_(std::move(optimizer)), fields_(held_state_fields(run_.config)) {}

  void attach(std::vector<at::Tensor> parts, const std::vector<at::Tensor>& state,
              std::int64_t steps) override {
    parts_.clear();
    for (std::size_t i = 0; i < parts.size(); ++i) parts_.emplace_back(part_name(i), parts[i]);
    optimizer_ = run_.make(parts_);
    steps_ = steps;
    if (state.empty()) return;
    models::NamedTensors named;
    for (std::size_t i = 0; i < parts_.size(); ++i) {
      for (std::size_t f = 0; f < fields_.size(); ++f) {
        named.emplace_back(run_.state_name(part_name(i), fields_[f]),
                           state.at(i * fields_.size() + f));
      }
      if (counts_steps(run_.config)) {
        named.emplace_back(run_.state_name(part_name(i), "step"),
                           at::scalar_tensor(steps, at::kLong));
      }
    }
    run_.import_state(*optimizer_, parts_, named);
  }

  void apply(const std::vector<at::Tensor>& pushed, double lr, double weight) override {
    for (std::size_t i = 0; i < parts_.size(); ++i) parts_[i].second.mutable_grad() = pushed[i];
    run_.set_learning_rate(*optimizer_, lr * weight);
    optimizer_->step();
    ++steps_;
  }

  int fields() const override { return static_cast<int>(fields_.size()); }

  std::vector<at::Tensor> state() const override {
    std::map<std::string, at::Tensor> saved;
    for (auto& [name, t] : run_.export_state(*optimizer_, parts_)) {
      saved[name] = t;
    }
    std::vector<at::Tensor> out;
    for (const auto& [name, part] : parts_) {
      for (const std::string& field : fields_) {
        auto it = saved.find(run_.state_name(name, field));
        out.push_back(it != saved.end() ? it->second : at::zeros_like(part));
      }
    }
    return out;
  }

  std::int64_t steps() const override { return steps_; }

 private:
  RunOptimizer run_;
  std::vector<std::string> fields_;
  models::NamedTensors parts_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::int64_t steps_ = 0;
};

}  // namespace

std::vector<std::string> held_state_fields(const OptimizerConfig& config) {
  if (config.name == "sgd") {
    return config.momentum > 0 ? std::vector<std::string>{"momentum_buffer"}
                               : std::vector<std::string>{};
  }
  return {"exp_avg", "exp_avg_sq"};
}

std::unique_ptr<ServerUpdate> server_optimizer(RunOptimizer optimizer) {
  return std::make_unique<OptimizerUpdate>(std::move(optimizer));
}

std::optional<HeldOptimizerState> flat_optimizer_state(const RunOptimizer& optimizer,
                                                       const models::NamedTensors& parameters,
                                                       const models::NamedTensors& state) {
  const OptimizerConfig& config = optimizer.config;
  if (state.empty()) return std::nullopt;
  std::map<std::string, at::Tensor> saved(state.begin(), state.end());
  const FlatLayout layout(parameters);
  HeldOptimizerState held;
  for (const std::string& field : held_state_fields(config)) {
    std::vector<at::Tensor> tensors;
    for (const auto& [name, p] : parameters) {
      auto it = saved.find(optimizer.state_name(name, field));
      tensors.push_back(it != saved.end() ? it->second : at::Tensor());
    }
    held.fields.push_back(layout.flatten(tensors));
  }
  if (counts_steps(config) && !parameters.empty()) {
    auto it = saved.find(optimizer.state_name(parameters.front().first, "step"));
    if (it != saved.end()) held.steps = it->second.item<std::int64_t>();
  }
  return held;
}

models::NamedTensors named_optimizer_state(const RunOptimizer& optimizer,
                                           const models::NamedTensors& parameters,
                                           const HeldOptimizerState& held) {
  const OptimizerConfig& config = optimizer.config;
  const FlatLayout layout(parameters);
  const auto fields = held_state_fields(config);
  if (held.fields.size() != fields.size()) {
    throw Error("ps: the servers sent " + std::to_string(held.fields.size()) +
                " optimizer state fields, " + config.name + " keeps " +
                std::to_string(fields.size()));
  }
  models::NamedTensors named;
  for (std::size_t i = 0; i < layout.size(); ++i) {
    if (counts_steps(config)) {
      named.emplace_back(optimizer.state_name(layout.name(i), "step"),
                         at::scalar_tensor(held.steps, at::kLong));
    }
    for (std::size_t f = 0; f < fields.size(); ++f) {
      // Contiguous copies: a checkpoint writes each tensor on its own.
      named.emplace_back(optimizer.state_name(layout.name(i), fields[f]),
                         layout.slice(held.fields[f], i).clone());
    }
  }
  return named;
}

}  // namespace loom::parallel::ps
