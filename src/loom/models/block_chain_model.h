// A model given as its chain of blocks, made elsewhere (a Python script's modules, one block
// each): forward runs the blocks in order, and the model's parameters and buffers are theirs, in
// order. It lets a layout that splits a Model into pipeline stages run a script's own layers.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "loom/models/model.h"

namespace loom::models {

class BlockChainModel : public Model {
 public:
  // `set_train` switches the blocks between training and evaluation (null: nothing to switch).
  BlockChainModel(std::string name, std::vector<Block> blocks,
                  std::function<void(bool)> set_train = nullptr);

  at::Tensor forward(const at::Tensor& input) override;
  NamedTensors named_parameters() override;
  NamedTensors named_buffers() override;
  void train(bool on) override {
    if (set_train_) set_train_(on);
  }
  bool is_convolutional() const override { return false; }
  std::string name() const override { return name_; }
  std::vector<Block> blocks() override { return blocks_; }

 private:
  std::string name_;
  std::vector<Block> blocks_;
  std::function<void(bool)> set_train_;
};

}  // namespace loom::models
