// The model interface the trainer sees: forward, named parameters and buffers in a stable order,
// train/eval mode, and the model as an ordered chain of blocks. Implemented over torch::nn
// modules (the zoo) and TorchScript modules, so the trainer, checkpoints, gradient sync and the
// pipeline partitioner treat both alike.
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "loom/core/config.h"
#include "loom/models/tensor_parallel.h"
#include "loom/models/tensor_plan.h"

namespace loom::models {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

// What a model learns to do, which fixes its input, loss and metrics: image classification
// (pixels [B, C, H, W] -> logits [B, classes] against labels [B]) or causal language modelling
// (token ids [B, T] -> logits [B, T, vocab] against the next tokens [B, T]).
enum class Task { kImageClassification, kLanguageModel };

// What the data gives the model.
struct InputSpec {
  int64_t channels = 1, height = 28, width = 28;  // images
  int64_t classes = 10;                           // images; tokens: the vocabulary
  int64_t seq_len = 0;                            // tokens per window
  Task task = Task::kImageClassification;
  // Tokens a sample is: a language model's window; 0 for images.
  int64_t tokens_per_sample() const { return task == Task::kLanguageModel ? seq_len : 0; }
};

// One contiguous piece of a model, in forward order: the unit pipeline stages are made of
// (a stem, a residual block, an encoder layer, a head). Running every block of a model in order
// on the input is its forward pass.
struct Block {
  std::string name;  // e.g. "stem", "layer2.1", "head"
  // This block's part of forward: the previous block's output in, its own output out.
  std::function<at::Tensor(const at::Tensor&)> forward;
  // What it owns, under the model's own names; every parameter and buffer of the model belongs
  // to exactly one block.
  NamedTensors parameters, buffers;
  // Parameters its forward reads that another block owns (a language model's head reads the
  // token embedding's matrix). A pipeline stage running this block keeps a copy of them and its
  // gradients are summed with the owner's.
  NamedTensors tied;
};

class Model {
 public:
  virtual ~Model() = default;

  // The task's output for its input (see Task): logits [B, classes] for images [B, C, H, W],
  // logits [B, T, vocab] for token ids [B, T].
  virtual at::Tensor forward(const at::Tensor& input) = 0;
  virtual NamedTensors named_parameters() = 0;
  virtual NamedTensors named_buffers() = 0;
  virtual void train(bool on) = 0;
  // Convolutional models run faster in channels_last on CPUs with oneDNN.
  virtual bool is_convolutional() const = 0;
  virtual std::string name() const = 0;
  // The model as a chain of blocks (at least one). The blocks share the model's tensors and
  // stay valid as long as the model.
  virtual std::vector<Block> blocks() = 0;

  // Recompute in backward, instead of keeping, the activations inside every `every`-th block
  // (blocks every-1, 2 x every-1, ...; never the last), in forward() and in blocks(); 0 = none.
  // Throws ConfigError naming train.activation_checkpointing for a model that cannot.
  virtual void set_recompute_every(int64_t every);
  // Training FLOPs per sample by the model's own count where it has one (a transformer's
  // 6N + 12 L d T per token), and that count in words; 0 = count the forward pass's operations
  // instead (which, under tensor parallelism, would see only this rank's share of the products).
  virtual double training_flops_per_sample() const { return 0; }
  virtual std::string training_flops_basis() const { return ""; }

  // Whether forward and backward make collectives with other ranks that read other data (ZeRO-3's
  // gathers over the replicas): a rank must then run them even for a micro-batch whose every
  // sample was bad, so that the ranks' calls stay in step.
  virtual bool forward_is_collective() const { return false; }

  // Tensor parallelism's plan for the model (tensor_plan.h), over modules()' submodules: empty
  // for a model that has none (it cannot take parallel.tensor). apply_tensor_plan splits it.
  virtual TensorPlan tensor_plan() const { return {}; }
  // The model's torch::nn modules, for a plan to split; null for a model not made of them.
  virtual torch::nn::Module* modules() { return nullptr; }

  int64_t parameter_count();
  // Re-lays out 4-d parameters (conv weights) in `format`; values are unchanged.
  void set_memory_format(at::MemoryFormat format);
  // Moves every parameter and buffer to `device` in place, as torch's Module::to does: the
  // tensors keep their identity (the blocks, ties and what is made of the model later see them
  // there). What a model keeps that is neither (a causal mask, rotary tables) follows its input.
  void to(at::Device device);
};

// Builds a model of the configured architecture for the input; throws ConfigError when the two
// do not fit (e.g. a ViT patch size that does not divide the image).
std::unique_ptr<Model> make_model(const ModelConfig& config, const InputSpec& input);

// Whether the zoo's model `name` is a language model (it trains on tokens: gpt, llama).
bool is_language_model(const std::string& name);

// The context, in tokens, that a language model's configuration gives it without data.seq_len
// (a GPT or Llama preset's); 0 where it gives none.
int64_t configured_context(const ModelConfig& config);

// Checks that the model's blocks, run in order on `probe`, give its forward pass (in eval mode,
// without gradients; the model is left in train mode) and that they own each parameter and
// buffer exactly once. Throws ConfigError with the reason when not: a model that cannot be split
// cannot be pipelined.
void check_blocks(Model& model, const at::Tensor& probe);

}  // namespace loom::models
