#include "loom/models/planned_layers.h"

#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>

#include "loom/models/draw_key.h"

namespace loom::models {

using Kind = TensorStyle::Kind;

TensorSplits PlannedLayer::take(const TensorStyle& style, TensorGroup& group) {
  TensorSplits splits = cuts(style, group.size());
  for (auto& [name, split] : splits) {
    at::Tensor parameter = named_parameters(/*recurse=*/false)[name];
    keep_slice(parameter, split, group);
  }
  style_ = style;
  group_ = &group;
  cut_ = !splits.empty();
  return splits;
}

Linear::Linear(int64_t in, int64_t out, bool with_bias) {
  // Drawn as torch::nn::Linear draws them (its own initialisation, in its order), so that a model
  // made of these starts from the values it did when it was made of torch's.
  const torch::nn::Linear drawn(torch::nn::LinearOptions(in, out).bias(with_bias));
  weight = register_parameter("weight", drawn->weight.detach());
  if (with_bias) bias = register_parameter("bias", drawn->bias.detach());
}

bool Linear::takes(const TensorStyle& style) const {
  return style.kind == Kind::kColwise || style.kind == Kind::kRowwise;
}

TensorSplits Linear::cuts(const TensorStyle& style, int64_t /*ranks*/) const {
  if (style.kind == Kind::kRowwise) return {{"weight", kByInputs}};  // the bias stays whole
  const TensorSplit by_outputs{0, style.sections};
  TensorSplits splits{{"weight", by_outputs}};
  if (bias.defined()) splits["bias"] = by_outputs;
  return splits;
}

int64_t Linear::part() const {
  return group_ && style_.kind == Kind::kColwise ? group_->rank() : 0;
}

int64_t Linear::parts() const {
  return group_ && style_.kind == Kind::kColwise ? group_->size() : 1;
}

at::Tensor Linear::forward(const at::Tensor& x) {
  if (!group_) return at::linear(x, weight, bias);
  if (style_.kind == Kind::kColwise) {
    // x whole on every rank (its gradient summed over the group), or this rank's positions,
    // gathered for the product.
    if (by_sequence()) return gathered_linear(x, weight, bias, *group_);
    return at::linear(enter_split(x, *group_), weight, bias);
  }
  // This rank's partial sums, summed over the group (kept by this rank's positions by the
  // sequence); the whole bias added after the sum (used on those positions only: its gradient
  // summed over the group).
  const at::Tensor partial = at::linear(x, weight);
  if (by_sequence()) {
    const at::Tensor y = scatter_sequence(partial, *group_);
    return bias.defined() ? y + enter_split(bias, *group_) : y;
  }
  const at::Tensor y = leave_split(partial, *group_);
  return bias.defined() ? y + bias : y;
}

Embedding::Embedding(int64_t rows, int64_t dim) {
  const torch::nn::Embedding drawn(rows, dim);  // as torch::nn::Embedding draws it
  weight = register_parameter("weight", drawn->weight.detach());
}

bool Embedding::takes(const TensorStyle& style) const {
  return style.kind == Kind::kVocabulary || style.kind == Kind::kSequence;
}

TensorSplits Embedding::cuts(const TensorStyle& style, int64_t ranks) const {
  // By the vocabulary where its rows divide; whole otherwise (every rank looks up its own).
  if (style.kind == Kind::kVocabulary && weight.size(0) % ranks == 0) {
    return {{"weight", kByOutputs}};
  }
  return {};
}

at::Tensor Embedding::forward(const at::Tensor& ids) {
  if (!group_) return at::embedding(weight, ids);
  if (cut_) {
    // Each rank's rows of the ids in its share, summed: every id's row (by the sequence, this
    // rank's positions' rows).
    const at::Tensor rows = own_rows(ids);
    return by_sequence() ? scatter_sequence(rows, *group_) : leave_split(rows, *group_);
  }
  // Whole, each rank looks up its positions' ids; the table's gradient, of those positions, is
  // summed over the group.
  if (by_sequence())
    return at::embedding(enter_split(weight, *group_), own_positions(ids, *group_));
  return at::embedding(weight, ids);
}

// Cut by the vocabulary: each id's row where this rank holds it, zeros for the others'.
at::Tensor Embedding::own_rows(const at::Tensor& ids) {
  const int64_t share = weight.size(0);
  const at::Tensor local = ids - group_->rank() * share;
  const at::Tensor mine = local.ge(0).logical_and(local.lt(share));
  return at::embedding(weight, local.clamp(0, share - 1)) *
         mine.unsqueeze(-1).to(weight.scalar_type());
}

at::Tensor Embedding::attend(const at::Tensor& h) {
  if (!group_) return at::linear(h, weight);
  if (cut_) {
    if (by_sequence()) return gathered_linear(h, weight, at::Tensor(), *group_);
    return at::linear(enter_split(h, *group_), weight);
  }
  // Whole, each rank computes its positions' logits, put together for the loss every rank
  // computes alike; the matrix's gradient, of those positions, is summed over the group.
  if (by_sequence()) return whole_sequence(at::linear(h, enter_split(weight, *group_)), *group_);
  return at::linear(h, weight);
}

LayerNorm::LayerNorm(int64_t dim, double eps) : dim_(dim), eps_(eps) {
  weight = register_parameter("weight", at::ones({dim}));
  bias = register_parameter("bias", at::zeros({dim}));
}

bool LayerNorm::takes(const TensorStyle& style) const { return style.kind == Kind::kSequence; }

at::Tensor LayerNorm::forward(const at::Tensor& x) {
  // By the sequence, x is this rank's positions: its weight and bias see only theirs, so their
  // gradients are summed over the group.
  if (by_sequence()) {
    return at::layer_norm(x, {dim_}, enter_split(weight, *group_), enter_split(bias, *group_),
                          eps_);
  }
  return at::layer_norm(x, {dim_}, weight, bias, eps_);
}

RmsNorm::RmsNorm(int64_t dim, double eps) : eps_(eps) {
  weight = register_parameter("weight", at::ones({dim}));
}

bool RmsNorm::takes(const TensorStyle& style) const { return style.kind == Kind::kSequence; }

at::Tensor RmsNorm::forward(const at::Tensor& x) {
  const at::Tensor wide = x.to(at::kFloat);
  const at::Tensor normed =
      (wide * at::rsqrt(wide.pow(2).mean(-1, true) + eps_)).to(x.scalar_type());
  // By the sequence, x is this rank's positions: the scale's gradient is summed over the group.
  return (by_sequence() ? enter_split(weight, *group_) : weight) * normed;
}

bool Dropout::takes(const TensorStyle& style) const { return style.kind == Kind::kSequence; }

at::Tensor Dropout::forward(const at::Tensor& x) {
  if (by_sequence()) return sequence_dropout(x, p_, is_training(), *group_);
  return keyed_dropout(x, p_, is_training());
}

}  // namespace loom::models
