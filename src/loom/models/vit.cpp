#include "loom/models/vit.h"

#include <torch/nn/init.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <cmath>
#include <string>

#include "loom/core/error.h"
#include "loom/core/text.h"
#include "loom/models/linear.h"
#include "loom/models/tensor_parallel.h"

namespace loom::models {
namespace {

constexpr int64_t kDim = 192, kDepth = 12, kHeads = 3, kMlp = 768;

// How tensor parallelism cuts a block's weights (Megatron's, as the GPT's): qkv's output is
// reshaped as [3, heads, head_dim], so its rows are three sections, each cut by heads.
const TensorSplit kQueryKeyValue{0, 3};

class EncoderBlock : public torch::nn::Module {
 public:
  EncoderBlock() {
    norm1_ = register_module("norm1",
                             torch::nn::LayerNorm(torch::nn::LayerNormOptions({kDim}).eps(1e-6)));
    qkv_ = register_module("qkv", torch::nn::Linear(kDim, 3 * kDim));
    proj_ = register_module("proj", torch::nn::Linear(kDim, kDim));
    norm2_ = register_module("norm2",
                             torch::nn::LayerNorm(torch::nn::LayerNormOptions({kDim}).eps(1e-6)));
    fc1_ = register_module("fc1", torch::nn::Linear(kDim, kMlp));
    fc2_ = register_module("fc2", torch::nn::Linear(kMlp, kDim));
  }

  // Tensor parallelism: this rank keeps the query, key and value rows of its heads and the
  // matching input columns of the projection, and its share of the MLP's hidden width.
  void split(TensorGroup& group) {
    keep_slice(qkv_->weight, kQueryKeyValue, group);
    keep_slice(qkv_->bias, kQueryKeyValue, group);
    keep_slice(proj_->weight, kByInputs, group);
    keep_slice(fc1_->weight, kByOutputs, group);
    keep_slice(fc1_->bias, kByOutputs, group);
    keep_slice(fc2_->weight, kByInputs, group);
    heads_ /= group.size();
    group_ = &group;
  }

  at::Tensor forward(const at::Tensor& x) {
    at::Tensor h = x + attention(norm1_->forward(x));
    return h + mlp(norm2_->forward(h));
  }

 private:
  at::Tensor attention(const at::Tensor& x) {
    const int64_t b = x.size(0), n = x.size(1), head_dim = kDim / kHeads;
    // [B, N, 3*D] -> [3, B, heads, N, head_dim] (this rank's heads under tensor parallelism)
    at::Tensor qkv = linear(qkv_, group_ ? enter_split(x, *group_) : x)
                         .reshape({b, n, 3, heads_, head_dim})
                         .permute({2, 0, 3, 1, 4});
    at::Tensor scores = at::matmul(qkv[0], qkv[1].transpose(-2, -1)) / std::sqrt(double(head_dim));
    at::Tensor out =
        at::matmul(scores.softmax(-1), qkv[2]).transpose(1, 2).reshape({b, n, heads_ * head_dim});
    if (!group_) return linear(proj_, out);
    // Each rank's heads' share of the projection, summed: replicated again.
    return leave_split(at::linear(out, proj_->weight), *group_) + proj_->bias;
  }

  at::Tensor mlp(const at::Tensor& x) {
    if (!group_) return linear(fc2_, at::gelu(linear(fc1_, x)));
    const at::Tensor hidden = at::gelu(linear(fc1_, enter_split(x, *group_)));
    return leave_split(at::linear(hidden, fc2_->weight), *group_) + fc2_->bias;
  }

  int64_t heads_ = kHeads;        // this rank's
  TensorGroup* group_ = nullptr;  // tensor parallelism's, once split
  torch::nn::LayerNorm norm1_{nullptr}, norm2_{nullptr};
  torch::nn::Linear qkv_{nullptr}, proj_{nullptr}, fc1_{nullptr}, fc2_{nullptr};
};

class VitTiny : public ZooNetwork {
 public:
  VitTiny(const InputSpec& in, int64_t patch) : input_(in), patch_(patch) {
    const int64_t patches = (in.height / patch) * (in.width / patch);
    patch_embed_ = register_module(
        "patch_embed",
        torch::nn::Conv2d(torch::nn::Conv2dOptions(in.channels, kDim, patch).stride(patch)));
    cls_token_ = register_parameter("cls_token", at::zeros({1, 1, kDim}));
    pos_embed_ = register_parameter("pos_embed", at::zeros({1, patches + 1, kDim}));
    // A ModuleList names the blocks "blocks.0" ... as timm does; blocks_ keeps typed handles.
    torch::nn::ModuleList list;
    for (int64_t i = 0; i < kDepth; ++i) {
      blocks_.push_back(std::make_shared<EncoderBlock>());
      list->push_back(blocks_.back());
    }
    register_module("blocks", list);
    norm_ = register_module("norm",
                            torch::nn::LayerNorm(torch::nn::LayerNormOptions({kDim}).eps(1e-6)));
    head_ = register_module("head", torch::nn::Linear(kDim, in.classes));
    torch::NoGradGuard no_grad;
    pos_embed_.normal_(0.0, 0.02);
    cls_token_.normal_(0.0, 0.02);
  }

  // The embedding, every encoder layer, the head.
  std::vector<BlockSpec> block_specs() override {
    std::vector<BlockSpec> blocks;
    blocks.push_back({"embed",
                      {"patch_embed", "cls_token", "pos_embed"},
                      [this](const at::Tensor& x) {
                        at::Tensor y =
                            patch_embed_->forward(x).flatten(2).transpose(1, 2);  // [B, N, D]
                        return at::cat({cls_token_.expand({y.size(0), -1, -1}), y}, 1) + pos_embed_;
                      },
                      {}});
    for (size_t i = 0; i < blocks_.size(); ++i) {
      auto* block = blocks_[i].get();
      blocks.push_back({"blocks." + std::to_string(i),
                        {"blocks." + std::to_string(i)},
                        [block](const at::Tensor& x) { return block->forward(x); },
                        {}});
    }
    blocks.push_back(
        {"head",
         {"norm", "head"},
         [this](const at::Tensor& x) { return head_->forward(norm_->forward(x).select(1, 0)); },
         {}});
    return blocks;
  }

  // Tensor parallelism over the encoder blocks: attention by heads, the MLP by its hidden
  // width. The patch embedding, class token, position table, LayerNorms and head stay whole on
  // every rank (the logits are not split).
  bool split_for_tensor_parallel(TensorGroup& group) override {
    const int64_t t = group.size();
    if (kHeads % t != 0) {
      throw ConfigError::at_key(
          "parallel.tensor",
          std::to_string(t) + " ranks do not split the ViT's " + std::to_string(kHeads) +
              " heads; it may be " + divisors_in_words(kHeads),
          {{"value", std::to_string(t)}, {"allowed", divisors_in_words(kHeads)}});
    }
    for (auto& block : blocks_) block->split(group);
    split_ = true;
    return true;
  }
  TensorSplits tensor_splits() const override {
    TensorSplits splits;
    if (!split_) return splits;
    for (size_t i = 0; i < blocks_.size(); ++i) {
      const std::string b = "blocks." + std::to_string(i) + ".";
      splits[b + "qkv.weight"] = kQueryKeyValue;
      splits[b + "qkv.bias"] = kQueryKeyValue;
      splits[b + "proj.weight"] = kByInputs;
      splits[b + "fc1.weight"] = kByOutputs;
      splits[b + "fc1.bias"] = kByOutputs;
      splits[b + "fc2.weight"] = kByInputs;
    }
    return splits;
  }

  // 6 FLOPs (forward and backward) per multiply-add of the matrix products: the patch
  // embedding, every block's four linears and attention's scores and weighted sum over its
  // tokens (the patches and the class token), and the head.
  double training_flops_per_sample() const override {
    const double d = kDim, patches = (input_.height / patch_) * (input_.width / patch_);
    const double tokens = patches + 1;
    const double embedding = patches * input_.channels * patch_ * patch_ * d;
    const double block = tokens * (4 * d * d + 2 * d * kMlp) + 2 * tokens * tokens * d;
    return 6 * (embedding + kDepth * block + d * input_.classes);
  }
  std::string training_flops_basis() const override {
    return "6 x the matrix products' multiply-adds per sample";
  }

 private:
  InputSpec input_;
  int64_t patch_;
  bool split_ = false;  // over a tensor group
  torch::nn::Conv2d patch_embed_{nullptr};
  at::Tensor cls_token_, pos_embed_;
  std::vector<std::shared_ptr<EncoderBlock>> blocks_;
  torch::nn::LayerNorm norm_{nullptr};
  torch::nn::Linear head_{nullptr};
};

}  // namespace

std::shared_ptr<ZooNetwork> make_vit_tiny(const InputSpec& input, int64_t patch_size) {
  if (input.height % patch_size != 0 || input.width % patch_size != 0) {
    throw ConfigError("config key 'model.patch_size': " + std::to_string(patch_size) +
                      " does not divide the input size " + std::to_string(input.height) + "x" +
                      std::to_string(input.width));
  }
  return std::make_shared<VitTiny>(input, patch_size);
}

}  // namespace loom::models
