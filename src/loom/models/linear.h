// A torch::nn::Linear applied to inputs of any rank in one fused product.
#pragma once

#include <ATen/ATen.h>
#include <torch/nn/modules/linear.h>

namespace loom::models {

// y = x W^T + b over the last dimension of `x`. The C++ frontend's Linear::forward multiplies
// an input of more than two dimensions with matmul and then adds the bias in a pass of its own
// (its functional linear predates ATen's fused path): on a GPT's [8, 256, C] bf16 activations
// that second pass cost 0.05-0.15 ms per product on the test machine, a few ms of a 250 ms step.
// ATen's linear folds the leading dimensions of a contiguous input into one addmm, bias
// included.
inline at::Tensor linear(const torch::nn::Linear& layer, const at::Tensor& x) {
  return at::linear(x, layer->weight, layer->bias.defined() ? layer->bias : at::Tensor());
}

}  // namespace loom::models
