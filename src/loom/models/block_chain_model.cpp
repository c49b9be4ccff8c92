#include "loom/models/block_chain_model.h"

#include "loom/core/error.h"

namespace loom::models {

BlockChainModel::BlockChainModel(std::string name, std::vector<Block> blocks,
                                 std::function<void(bool)> set_train)
    : name_(std::move(name)), blocks_(std::move(blocks)), set_train_(std::move(set_train)) {
  if (blocks_.empty()) throw ConfigError("model '" + name_ + "': a chain of no blocks");
  for (const Block& block : blocks_) {
    if (!block.forward)
      throw Error("model '" + name_ + "': block '" + block.name + "' runs nothing");
  }
}

at::Tensor BlockChainModel::forward(const at::Tensor& input) {
  at::Tensor x = input;
  for (const Block& block : blocks_) x = block.forward(x);
  return x;
}

NamedTensors BlockChainModel::named_parameters() {
  NamedTensors all;
  for (const Block& block : blocks_) {
    all.insert(all.end(), block.parameters.begin(), block.parameters.end());
  }
  return all;
}

NamedTensors BlockChainModel::named_buffers() {
  NamedTensors all;
  for (const Block& block : blocks_)
    all.insert(all.end(), block.buffers.begin(), block.buffers.end());
  return all;
}

}  // namespace loom::models
