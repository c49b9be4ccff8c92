#include "loom/models/model.h"

#include <torch/nn/modules/container/any.h>
#include <torch/utils.h>

#include <algorithm>
#include <map>

#include "loom/core/error.h"
#include "loom/models/draw_key.h"
#include "loom/models/module_model.h"
#include "loom/models/recompute.h"

namespace loom::models {
namespace {

bool owned_by(const std::string& tensor_name, const std::string& prefix) {
  return tensor_name == prefix ||
         (tensor_name.size() > prefix.size() &&
          tensor_name.compare(0, prefix.size(), prefix) == 0 && tensor_name[prefix.size()] == '.');
}

// The tensors of `all` that one of `prefixes` owns, in the model's order.
NamedTensors owned(const NamedTensors& all, const std::vector<std::string>& prefixes) {
  NamedTensors out;
  for (const auto& item : all) {
    for (const std::string& prefix : prefixes) {
      if (owned_by(item.first, prefix)) {
        out.push_back(item);
        break;
      }
    }
  }
  return out;
}

// Each tensor of `all` must appear exactly once over the blocks' lists.
void check_owned_once(const std::string& model, const char* what, const NamedTensors& all,
                      const std::vector<Block>& blocks, NamedTensors Block::*member) {
  std::map<std::string, std::string> owner;
  for (const Block& block : blocks) {
    for (const auto& item : block.*member) {
      auto [it, fresh] = owner.emplace(item.first, block.name);
      if (!fresh) {
        throw ConfigError("model '" + model + "': " + what + " '" + item.first +
                          "' belongs to two blocks, '" + it->second + "' and '" + block.name + "'");
      }
    }
  }
  for (const auto& item : all) {
    if (!owner.count(item.first)) {
      throw ConfigError("model '" + model + "': " + what + " '" + item.first +
                            "' belongs to no block (it is used outside the chain of blocks)",
                        {{"problem", "outside_blocks"}, {"tensor", item.first}});
    }
  }
}

}  // namespace

int64_t Model::parameter_count() {
  int64_t n = 0;
  for (const auto& [name, p] : named_parameters()) n += p.numel();
  return n;
}

void Model::set_memory_format(at::MemoryFormat format) {
  for (auto& [name, p] : named_parameters()) {
    if (p.dim() == 4) p.set_data(p.contiguous(format));
  }
}

void Model::to(at::Device device) {
  for (auto& [name, p] : named_parameters()) {
    if (p.device() != device) p.set_data(p.detach().to(device));
  }
  for (auto& [name, b] : named_buffers()) {
    if (b.device() != device) b.set_data(b.detach().to(device));
  }
}

std::function<at::Tensor(const at::Tensor&)> run_children(torch::nn::Sequential sequential,
                                                          size_t begin, size_t end) {
  return [sequential, begin, end](const at::Tensor& input) mutable {
    at::Tensor x = input;
    for (size_t i = begin; i < end; ++i) x = sequential->begin()[static_cast<long>(i)].forward(x);
    return x;
  };
}

void Model::set_recompute_every(int64_t every) {
  if (every == 0) return;
  throw ConfigError("config key 'train.activation_checkpointing': model '" + name() +
                    "' is not one of the zoo's, whose blocks can be recomputed");
}

std::vector<Block> ModuleModel::plain_blocks() {
  const NamedTensors parameters = named_parameters(), buffers = named_buffers();
  std::vector<Block> out;
  for (BlockSpec& spec : net_->block_specs()) {
    NamedTensors tied;
    for (const std::string& name : spec.uses) {
      const auto it = std::find_if(parameters.begin(), parameters.end(),
                                   [&](const auto& named) { return named.first == name; });
      if (it == parameters.end()) {
        throw Error("model '" + name_ + "': block '" + spec.name + "' uses '" + name +
                    "', which is no parameter of the model");
      }
      tied.push_back(*it);
    }
    out.push_back({spec.name, std::move(spec.forward), owned(parameters, spec.owns),
                   owned(buffers, spec.owns), std::move(tied)});
  }
  return out;
}

std::vector<Block> ModuleModel::blocks() {
  std::vector<Block> blocks = with_recompute(plain_blocks(), recompute_every_);
  // Each block's keyed draws are its own (draw_key.h); counted from outside the recompute
  // wrapper, which replays the draws of the forward it recomputes.
  for (size_t i = 0; i < blocks.size(); ++i) {
    blocks[i].forward = [index = static_cast<int64_t>(i),
                         forward = std::move(blocks[i].forward)](const at::Tensor& x) {
      start_block_draws(index);
      return forward(x);
    };
  }
  return blocks;
}

void ModuleModel::set_recompute_every(int64_t every) {
  recompute_every_ = every;
  chain_.clear();
}

at::Tensor ModuleModel::forward(const at::Tensor& input) {
  // The network's own forward, unless its blocks recompute or key their draws.
  if (recompute_every_ == 0 && !DrawKeyScope::state().samples) return net_->forward(input);
  if (chain_.empty()) chain_ = blocks();
  at::Tensor x = input;
  for (const Block& block : chain_) x = block.forward(x);
  return x;
}

void check_blocks(Model& model, const at::Tensor& probe) {
  const std::vector<Block> blocks = model.blocks();
  if (blocks.empty()) throw ConfigError("model '" + model.name() + "' has no blocks");
  check_owned_once(model.name(), "parameter", model.named_parameters(), blocks, &Block::parameters);
  check_owned_once(model.name(), "buffer", model.named_buffers(), blocks, &Block::buffers);
  torch::NoGradGuard no_grad;
  model.train(false);
  at::Tensor whole, chained = probe;
  try {
    whole = model.forward(probe);
    for (const Block& block : blocks) chained = block.forward(chained);
  } catch (const c10::Error& e) {
    model.train(true);
    throw ConfigError("model '" + model.name() +
                      "': running its blocks one after another failed (" +
                      e.what_without_backtrace() + ")");
  } catch (const CommError&) {
    throw;  // a collective inside the model failed: not the model's shape
  } catch (const TimeoutError&) {
    throw;
  } catch (const Error& e) {
    model.train(true);
    throw ConfigError("model '" + model.name() +
                      "': running its blocks one after another failed (" + e.what() + ")");
  }
  model.train(true);
  if (!chained.sizes().equals(whole.sizes()) || !at::allclose(chained, whole, 1e-5, 1e-6)) {
    throw ConfigError("model '" + model.name() +
                          "': its forward pass is not the chain of its blocks (outputs differ), so "
                          "it cannot be split into stages",
                      {{"problem", "not_a_chain"}});
  }
}

}  // namespace loom::models
