#include "loom/models/torchscript_model.h"

#include <torch/script.h>

#include <filesystem>

#include "loom/core/error.h"

namespace loom::models {
namespace {

class TorchScriptModel : public Model {
 public:
  TorchScriptModel(std::string path, torch::jit::Module module)
      : path_(std::move(path)), module_(std::move(module)) {
    for (const auto& p : module_.parameters()) {
      if (p.dim() == 4) convolutional_ = true;
    }
  }

  at::Tensor forward(const at::Tensor& input) override {
    c10::IValue out = module_.forward({input});
    if (!out.isTensor()) {
      throw Error("TorchScript module '" + path_ + "': forward returned " + out.tagKind() +
                  ", expected a Tensor of logits");
    }
    return out.toTensor();
  }
  NamedTensors named_parameters() override { return collect(module_.named_parameters()); }
  NamedTensors named_buffers() override { return collect(module_.named_buffers()); }
  void train(bool on) override { module_.train(on); }
  bool is_convolutional() const override { return convolutional_; }
  std::string name() const override { return "torchscript"; }

  // The module's top-level children, in the order they were registered; a parameter or buffer
  // of the root itself belongs to no child, which check_blocks() reports.
  std::vector<Block> blocks() override {
    std::vector<Block> out;
    for (const auto& child : module_.named_children()) {
      torch::jit::Module module = child.value;
      out.push_back({child.name,
                     [module, name = child.name](const at::Tensor& x) mutable {
                       c10::IValue y = module.forward({x});
                       if (!y.isTensor()) {
                         throw Error("TorchScript block '" + name + "' returned " + y.tagKind() +
                                     ", expected a Tensor");
                       }
                       return y.toTensor();
                     },
                     prefixed(child.name, module.named_parameters()),
                     prefixed(child.name, module.named_buffers())});
    }
    return out;
  }

 private:
  template <typename List>
  static NamedTensors collect(const List& list) {
    NamedTensors out;
    for (const auto& item : list) out.emplace_back(item.name, item.value);
    return out;
  }

  template <typename List>
  static NamedTensors prefixed(const std::string& prefix, const List& list) {
    NamedTensors out;
    for (const auto& item : list) out.emplace_back(prefix + "." + item.name, item.value);
    return out;
  }

  std::string path_;
  torch::jit::Module module_;
  bool convolutional_ = false;
};

}  // namespace

std::unique_ptr<Model> load_torchscript(const std::string& path) {
  if (!std::filesystem::exists(path)) {
    throw ConfigError("config key 'model.torchscript': file '" + path + "' does not exist");
  }
  torch::jit::Module module;
  try {
    module = torch::jit::load(path);
  } catch (const c10::Error& e) {
    throw ConfigError("config key 'model.torchscript': '" + path +
                      "' is not a loadable TorchScript module: " + e.what_without_backtrace());
  }
  return std::make_unique<TorchScriptModel>(path, std::move(module));
}

}  // namespace loom::models
