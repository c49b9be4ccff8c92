// The model interface the trainer sees: forward, named parameters and buffers in a stable order,
// train/eval mode. Implemented over torch::nn modules (the zoo) and TorchScript modules, so the
// trainer, checkpoints and (later) gradient sync treat both alike.
#pragma once

#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "loom/core/config.h"

namespace loom::models {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

// What the data gives the model.
struct InputSpec {
  int64_t channels = 1, height = 28, width = 28;
  int64_t classes = 10;
};

class Model {
 public:
  virtual ~Model() = default;

  // Logits [B, classes] for input [B, C, H, W].
  virtual at::Tensor forward(const at::Tensor& input) = 0;
  virtual NamedTensors named_parameters() = 0;
  virtual NamedTensors named_buffers() = 0;
  virtual void train(bool on) = 0;
  // Convolutional models run faster in channels_last on CPUs with oneDNN.
  virtual bool is_convolutional() const = 0;
  virtual std::string name() const = 0;

  int64_t parameter_count();
  // Re-lays out 4-d parameters (conv weights) in `format`; values are unchanged.
  void set_memory_format(at::MemoryFormat format);
};

// Builds a model of the configured architecture for the input; throws ConfigError when the two
// do not fit (e.g. a ViT patch size that does not divide the image).
std::unique_ptr<Model> make_model(const ModelConfig& config, const InputSpec& input);

}  // namespace loom::models
