// Adapts a torch::nn classifier from the zoo to the Model interface.
#pragma once

#include <torch/nn/module.h>

#include "loom/models/model.h"

namespace loom::models {

// Base of the zoo's networks: a torch::nn::Module with a virtual forward.
class Classifier : public torch::nn::Module {
 public:
  virtual at::Tensor forward(at::Tensor x) = 0;
};

class ModuleModel : public Model {
 public:
  ModuleModel(std::string name, std::shared_ptr<Classifier> net, bool convolutional)
      : name_(std::move(name)), net_(std::move(net)), convolutional_(convolutional) {}

  at::Tensor forward(const at::Tensor& input) override { return net_->forward(input); }
  NamedTensors named_parameters() override { return to_vector(net_->named_parameters()); }
  NamedTensors named_buffers() override { return to_vector(net_->named_buffers()); }
  void train(bool on) override { net_->train(on); }
  bool is_convolutional() const override { return convolutional_; }
  std::string name() const override { return name_; }

  Classifier& module() { return *net_; }

 private:
  template <typename Dict>
  static NamedTensors to_vector(const Dict& dict) {
    NamedTensors out;
    for (const auto& item : dict) out.emplace_back(item.key(), item.value());
    return out;
  }

  std::string name_;
  std::shared_ptr<Classifier> net_;
  bool convolutional_;
};

}  // namespace loom::models
