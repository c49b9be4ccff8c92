#include "loom/models/vit.h"

#include <torch/nn/init.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <cmath>
#include <string>

#include "loom/core/error.h"
#include "loom/models/planned_layers.h"

namespace loom::models {
namespace {

constexpr int64_t kDim = 192, kDepth = 12, kHeads = 3, kMlp = 768;

class EncoderBlock : public torch::nn::Module {
 public:
  EncoderBlock() {
    norm1_ = register_module("norm1",
                             torch::nn::LayerNorm(torch::nn::LayerNormOptions({kDim}).eps(1e-6)));
    qkv_ = register_module("qkv", std::make_shared<Linear>(kDim, 3 * kDim));
    proj_ = register_module("proj", std::make_shared<Linear>(kDim, kDim));
    norm2_ = register_module("norm2",
                             torch::nn::LayerNorm(torch::nn::LayerNormOptions({kDim}).eps(1e-6)));
    fc1_ = register_module("fc1", std::make_shared<Linear>(kDim, kMlp));
    fc2_ = register_module("fc2", std::make_shared<Linear>(kMlp, kDim));
  }

  at::Tensor forward(const at::Tensor& x) {
    at::Tensor h = x + attention(norm1_->forward(x));
    return h + mlp(norm2_->forward(h));
  }

 private:
  at::Tensor attention(const at::Tensor& x) {
    // [B, N, 3*D] -> [3, B, heads, N, head_dim] (the heads this rank holds under tensor
    // parallelism)
    const at::Tensor fused = qkv_->forward(x);
    const int64_t b = x.size(0), n = x.size(1), head_dim = kDim / kHeads;
    const int64_t heads = fused.size(2) / 3 / head_dim;
    at::Tensor qkv = fused.reshape({b, n, 3, heads, head_dim}).permute({2, 0, 3, 1, 4});
    at::Tensor scores = at::matmul(qkv[0], qkv[1].transpose(-2, -1)) / std::sqrt(double(head_dim));
    at::Tensor out =
        at::matmul(scores.softmax(-1), qkv[2]).transpose(1, 2).reshape({b, n, heads * head_dim});
    return proj_->forward(out);
  }

  at::Tensor mlp(const at::Tensor& x) { return fc2_->forward(at::gelu(fc1_->forward(x))); }

  torch::nn::LayerNorm norm1_{nullptr}, norm2_{nullptr};
  std::shared_ptr<Linear> qkv_, proj_, fc1_, fc2_;
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

  // Tensor parallelism over the encoder blocks (as the GPT's): attention by heads, the MLP by
  // its hidden width. The patch embedding, class token, position table, LayerNorms and head stay
  // whole on every rank (the logits are not split). No sequence split.
  TensorPlan tensor_plan() const override {
    TensorPlan plan;
    plan.styles = {{"blocks.*.qkv", colwise(3)},  // q, k and v, each by heads
                   {"blocks.*.proj", rowwise()},
                   {"blocks.*.fc1", colwise()},
                   {"blocks.*.fc2", rowwise()}};
    plan.divisors = {{kHeads, "the ViT's " + std::to_string(kHeads) + " heads", false, ""}};
    return plan;
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
