#include "loom/models/planned_layers.h"

#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>

#include "loom/core/error.h"
#include "loom/models/draw_key.h"

namespace loom::models {

using Kind = TensorStyle::Kind;

TensorSplits PlannedLayer::take(const TensorStyle& style, TensorGroup& group) {
  TensorSplits splits = cuts(style, group.size());
  for (auto& [name, split] : splits) {
    at::Tensor parameter = named_parameters()[name];  // its own, or its adapter's
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
  if (style.kind == Kind::kRowwise) {
    // The bias stays whole, and so does the adapter's B (after the sum of its A's parts).
    TensorSplits splits{{"weight", kByInputs}};
    if (lora_a_) splits["lora_A.weight"] = kByInputs;
    return splits;
  }
  const TensorSplit by_outputs{0, style.sections};
  TensorSplits splits{{"weight", by_outputs}};
  if (bias.defined()) splits["bias"] = by_outputs;
  if (lora_b_) splits["lora_B.weight"] = by_outputs;
  return splits;
}

void Linear::add_adapter(int64_t rank, double alpha, double dropout) {
  const int64_t in = weight.size(1), out = weight.size(0);
  lora_a_ = register_module("lora_A", std::make_shared<torch::nn::Module>());
  lora_b_ = register_module("lora_B", std::make_shared<torch::nn::Module>());
  const torch::nn::Linear drawn(torch::nn::LinearOptions(in, rank).bias(false));
  // The same tensors as the registered ones (a plan's cut sets their data in place).
  lora_a_weight_ = lora_a_->register_parameter("weight", drawn->weight.detach());
  lora_b_weight_ = lora_b_->register_parameter("weight", at::zeros({out, rank}));
  lora_scale_ = alpha / static_cast<double>(rank);
  lora_dropout_ = dropout;
  weight.requires_grad_(false);
  if (bias.defined()) bias.requires_grad_(false);
}

at::Tensor Linear::adapter(const at::Tensor& x) {
  const at::Tensor& a = lora_a_weight_;
  const at::Tensor& b = lora_b_weight_;
  if (!group_)
    return at::linear(at::linear(keyed_dropout(x, lora_dropout_, is_training()), a), b) *
           lora_scale_;
  if (style_.kind == Kind::kColwise) {
    // `x` entered the split already (forward's); A is whole on every rank but each rank's B
    // sees only its outputs: A's gradient is the sum over the group. By the sequence, `x` is
    // this rank's positions: A's rank-sized products of them are gathered (not the input, which
    // is wider), their dropout mask the whole sequence's.
    if (by_sequence()) {
      const at::Tensor dropped = sequence_dropout(x, lora_dropout_, is_training(), *group_);
      const at::Tensor low = gather_sequence(at::linear(dropped, enter_split(a, *group_)), *group_);
      return at::linear(low, b) * lora_scale_;
    }
    const at::Tensor low =
        at::linear(keyed_dropout(x, lora_dropout_, is_training()), enter_split(a, *group_));
    return at::linear(low, b) * lora_scale_;
  }
  // Rowwise: `x` holds this rank's inputs; the dropout mask is the whole input's, this rank's
  // columns of it, so that every layout drops what one process drops. The parts of A's product
  // are summed, then B (whole, with the same gradient on every rank) makes the outputs.
  at::Tensor dropped = x;
  if (is_training() && lora_dropout_ > 0) {
    std::vector<int64_t> whole = x.sizes().vec();
    const int64_t width = whole.back();
    whole.back() = width * group_->size();
    dropped = x * dropout_mask(whole, lora_dropout_, x.options().requires_grad(false))
                      .narrow(-1, group_->rank() * width, width);
  }
  // By the sequence, the sum keeps this rank's positions, and B, whole, sees only those: its
  // gradient is the sum over the group.
  if (by_sequence()) {
    return at::linear(scatter_sequence(at::linear(dropped, a), *group_), enter_split(b, *group_)) *
           lora_scale_;
  }
  return at::linear(leave_split(at::linear(dropped, a), *group_), b) * lora_scale_;
}

int64_t Linear::part() const {
  return group_ && style_.kind == Kind::kColwise ? group_->rank() : 0;
}

int64_t Linear::parts() const {
  return group_ && style_.kind == Kind::kColwise ? group_->size() : 1;
}

at::Tensor Linear::forward(const at::Tensor& x) {
  if (!group_) {
    const at::Tensor y = at::linear(x, weight, bias);
    return lora_a_ ? y + adapter(x) : y;
  }
  if (style_.kind == Kind::kColwise) {
    // x whole on every rank (its gradient summed over the group), or this rank's positions,
    // gathered for the product.
    if (by_sequence()) {
      const at::Tensor y = gathered_linear(x, weight, bias, *group_);
      return lora_a_ ? y + adapter(x) : y;
    }
    const at::Tensor entered = enter_split(x, *group_);
    const at::Tensor y = at::linear(entered, weight, bias);
    return lora_a_ ? y + adapter(entered) : y;
  }
  // This rank's partial sums, summed over the group (kept by this rank's positions by the
  // sequence); the whole bias added after the sum (used on those positions only: its gradient
  // summed over the group).
  const at::Tensor partial = at::linear(x, weight);
  if (by_sequence()) {
    const at::Tensor y = scatter_sequence(partial, *group_);
    const at::Tensor out = bias.defined() ? y + enter_split(bias, *group_) : y;
    return lora_a_ ? out + adapter(x) : out;
  }
  const at::Tensor y = leave_split(partial, *group_);
  const at::Tensor out = bias.defined() ? y + bias : y;
  return lora_a_ ? out + adapter(x) : out;
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
