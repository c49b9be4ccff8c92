// Adapts a network of the zoo (the image classifiers mlp, cnn, resnet and vit, and the GPT
// language models) to the Model interface.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/sequential.h>

#include "loom/models/model.h"

namespace loom::models {

// A block as a zoo network declares it: what it runs, and the names of the submodules and
// parameters it owns (prefixes of the network's parameter names).
struct BlockSpec {
  std::string name;
  std::vector<std::string> owns;
  std::function<at::Tensor(const at::Tensor&)> forward;
  std::vector<std::string> uses;  // full names of parameters it reads that others own
};

// Base of the zoo's networks, classifiers and language models alike: a torch::nn::Module
// declared as a chain of blocks. Its forward pass is the chain, so the whole model and its
// pipeline stages run the very same code.
class ZooNetwork : public torch::nn::Module {
 public:
  // Called once the submodules are registered; the functions may hold pointers into this.
  virtual std::vector<BlockSpec> block_specs() = 0;
  // See Model::training_flops_per_sample.
  virtual double training_flops_per_sample() const { return 0; }
  virtual std::string training_flops_basis() const { return ""; }
  // See Model::tensor_plan.
  virtual TensorPlan tensor_plan() const { return {}; }

  at::Tensor forward(at::Tensor x) {
    if (chain_.empty()) chain_ = block_specs();
    for (const BlockSpec& block : chain_) x = block.forward(x);
    return x;
  }

 private:
  std::vector<BlockSpec> chain_;
};

// Runs children [begin, end) of a Sequential: a block made of consecutive layers.
std::function<at::Tensor(const at::Tensor&)> run_children(torch::nn::Sequential sequential,
                                                          size_t begin, size_t end);

class ModuleModel : public Model {
 public:
  ModuleModel(std::string name, std::shared_ptr<ZooNetwork> net, bool convolutional)
      : name_(std::move(name)), net_(std::move(net)), convolutional_(convolutional) {}

  at::Tensor forward(const at::Tensor& input) override;
  NamedTensors named_parameters() override { return to_vector(net_->named_parameters()); }
  NamedTensors named_buffers() override { return to_vector(net_->named_buffers()); }
  void train(bool on) override { net_->train(on); }
  bool is_convolutional() const override { return convolutional_; }
  std::string name() const override { return name_; }
  std::vector<Block> blocks() override;
  void set_recompute_every(int64_t every) override;
  double training_flops_per_sample() const override { return net_->training_flops_per_sample(); }
  std::string training_flops_basis() const override { return net_->training_flops_basis(); }
  TensorPlan tensor_plan() const override { return net_->tensor_plan(); }
  torch::nn::Module* modules() override { return net_.get(); }

  ZooNetwork& module() { return *net_; }

 private:
  template <typename Dict>
  static NamedTensors to_vector(const Dict& dict) {
    NamedTensors out;
    for (const auto& item : dict) out.emplace_back(item.key(), item.value());
    return out;
  }

  std::vector<Block> plain_blocks();

  std::string name_;
  std::shared_ptr<ZooNetwork> net_;
  bool convolutional_;
  int64_t recompute_every_ = 0;
  // forward's blocks when they recompute or key their draws, made at its first such call
  std::vector<Block> chain_;
};

}  // namespace loom::models
