#include "loom/models/tensor_parallel.h"

#include <ATen/autocast_mode.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/graph_task.h>
#include <torch/custom_class.h>

#include "loom/core/error.h"
#include "loom/models/draw_key.h"

namespace loom::models {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// An autograd function's context keeps what backward needs as IValues only: the group goes in
// typed, as a custom class torch knows, not as an address in an integer. The class is registered
// with torch the first time a group is kept (not when the library loads: importing Loom changes
// nothing process-wide).
struct GroupHandle : torch::CustomClassHolder {
  explicit GroupHandle(TensorGroup* held) : group(held) {}
  TensorGroup* group;
};

void keep_group(AutogradContext* ctx, TensorGroup* group) {
  static const auto registered = torch::class_<GroupHandle>("loom", "TensorGroupHandle");
  (void)registered;
  ctx->saved_data["group"] = c10::make_intrusive<GroupHandle>(group);
}

TensorGroup* group_of(AutogradContext* ctx) {
  return ctx->saved_data["group"].toCustomClass<GroupHandle>()->group;
}

at::Tensor summed(const at::Tensor& t, TensorGroup& group, SumPass pass) {
  at::Tensor out = t.contiguous().clone();
  group.sum_in(out, pass);
  return out;
}

// A forward with gradients runs in backward when a recomputed block runs again there.
SumPass forward_pass() {
  return torch::autograd::get_current_graph_task_exec_info() ? SumPass::kBackward
                                                             : SumPass::kForward;
}

struct EnterSplit : public torch::autograd::Function<EnterSplit> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, TensorGroup* group) {
    keep_group(ctx, group);
    return x.view_as(x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {summed(grads[0], *group_of(ctx), SumPass::kBackward), at::Tensor()};
  }
};

struct LeaveSplit : public torch::autograd::Function<LeaveSplit> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& y, TensorGroup* group) {
    return summed(y, *group, forward_pass());
  }
  static variable_list backward(AutogradContext*, variable_list grads) {
    return {grads[0], at::Tensor()};
  }
};

struct GatherSequence : public torch::autograd::Function<GatherSequence> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, TensorGroup* group) {
    keep_group(ctx, group);
    return group_of(ctx)->gather_in(x.contiguous(), 1, forward_pass());
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {group_of(ctx)->sum_scatter_in(grads[0].contiguous(), 1, SumPass::kBackward),
            at::Tensor()};
  }
};

struct ScatterSequence : public torch::autograd::Function<ScatterSequence> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& y, TensorGroup* group) {
    keep_group(ctx, group);
    return group_of(ctx)->sum_scatter_in(y.contiguous(), 1, forward_pass());
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {group_of(ctx)->gather_in(grads[0].contiguous(), 1, SumPass::kBackward), at::Tensor()};
  }
};

struct WholeSequence : public torch::autograd::Function<WholeSequence> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, TensorGroup* group) {
    keep_group(ctx, group);
    return group_of(ctx)->gather_in(x.contiguous(), 1, forward_pass());
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {own_positions(grads[0], *group_of(ctx)), at::Tensor()};
  }
};

// The type a product of `x` computes in: autocast's lower precision where it is on for x's
// device, x's own otherwise.
at::ScalarType product_type(const at::Tensor& x) {
  if (!x.is_floating_point()) return x.scalar_type();
  const c10::DeviceType device = x.device().type();
  if (at::autocast::is_autocast_available(device) && at::autocast::is_autocast_enabled(device)) {
    return at::autocast::get_autocast_dtype(device);
  }
  return x.scalar_type();
}

// linear(gather(x), weight, bias), holding x (in the product's type) for backward, not the
// whole. Backward computes in the incoming gradient's type (the product's) as autocast's linear
// does, and sums the input's gradient in x's own type, as enter_split does after autocast's cast.
// Two functions, with a bias and without (an autograd function's inputs are all defined).
at::Tensor gathered_forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const at::Tensor& bias, TensorGroup* group) {
  keep_group(ctx, group);
  ctx->saved_data["x_type"] = static_cast<int64_t>(x.scalar_type());
  ctx->saved_data["bias"] = bias.defined();
  const at::Tensor part = x.to(product_type(x)).contiguous();
  ctx->save_for_backward({part, weight});
  return at::linear(group_of(ctx)->gather_in(part, 1, forward_pass()), weight, bias);
}

// The gradients of x, the weight and the bias (undefined without one).
variable_list gathered_backward(AutogradContext* ctx, const variable_list& grads) {
  TensorGroup& group = *group_of(ctx);
  const variable_list saved = ctx->get_saved_variables();
  const at::Tensor &part = saved[0], &weight = saved[1];
  const at::Tensor grad = grads[0].contiguous();
  const auto type = grad.scalar_type();
  const at::Tensor rows = grad.reshape({-1, grad.size(-1)});
  // Forward's input again: every rank's positions.
  const at::Tensor whole = group.gather_in(part, 1, SumPass::kBackward).to(type);
  const at::Tensor grad_weight =
      rows.t().mm(whole.reshape({-1, whole.size(-1)})).to(weight.scalar_type());
  const at::Tensor grad_bias =
      ctx->saved_data["bias"].toBool() ? rows.sum(0).to(weight.scalar_type()) : at::Tensor();
  const auto x_type = static_cast<at::ScalarType>(ctx->saved_data["x_type"].toInt());
  const at::Tensor grad_whole = at::matmul(grad, weight.to(type)).to(x_type);
  return {group.sum_scatter_in(grad_whole, 1, SumPass::kBackward), grad_weight, grad_bias};
}

struct GatheredLinear : public torch::autograd::Function<GatheredLinear> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const at::Tensor& bias, TensorGroup* group) {
    return gathered_forward(ctx, x, weight, bias, group);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list out = gathered_backward(ctx, grads);
    out.emplace_back();
    return out;
  }
};

struct GatheredProduct : public torch::autograd::Function<GatheredProduct> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            TensorGroup* group) {
    return gathered_forward(ctx, x, weight, at::Tensor(), group);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list out = gathered_backward(ctx, grads);
    return {out[0], out[1], at::Tensor()};
  }
};

// This rank's part of a length along a split dimension.
int64_t part_of(int64_t length, TensorGroup& group, const char* operation) {
  if (length % group.size() != 0) {
    throw Error(std::string("tensor parallel: ") + operation + ": a length of " +
                std::to_string(length) + " does not split over " + std::to_string(group.size()) +
                " ranks (rank " + std::to_string(group.rank()) + ")");
  }
  return length / group.size();
}

}  // namespace

at::Tensor TensorGroup::gather_in(const at::Tensor& part, int64_t dim, SumPass pass) {
  std::vector<int64_t> sizes = part.sizes().vec();
  const int64_t length = sizes[static_cast<std::size_t>(dim)];
  sizes[static_cast<std::size_t>(dim)] *= size();
  at::Tensor whole = at::zeros(sizes, part.options());
  whole.narrow(dim, rank() * length, length).copy_(part);
  sum_in(whole, pass);
  return whole;
}

at::Tensor TensorGroup::sum_scatter_in(const at::Tensor& whole, int64_t dim, SumPass pass) {
  const int64_t length = part_of(whole.size(dim), *this, "reduce-scatter");
  at::Tensor sum = whole.contiguous().clone();
  sum_in(sum, pass);
  return sum.narrow(dim, rank() * length, length).contiguous();
}

namespace {
thread_local int whole_sequence_guards = 0;
}  // namespace

WholeSequenceGuard::WholeSequenceGuard() { ++whole_sequence_guards; }
WholeSequenceGuard::~WholeSequenceGuard() { --whole_sequence_guards; }

bool splits_sequence_now(const TensorGroup& group) {
  return group.splits_sequence() && whole_sequence_guards == 0;
}

at::Tensor enter_split(const at::Tensor& x, TensorGroup& group) {
  if (!at::GradMode::is_enabled() || !x.requires_grad()) return x;
  return EnterSplit::apply(x, &group);
}

at::Tensor leave_split(const at::Tensor& y, TensorGroup& group) {
  if (!at::GradMode::is_enabled()) return summed(y, group, SumPass::kNoStep);
  if (!y.requires_grad()) return summed(y, group, forward_pass());
  return LeaveSplit::apply(y, &group);
}

at::Tensor gather_sequence(const at::Tensor& x, TensorGroup& group) {
  if (!at::GradMode::is_enabled()) return group.gather_in(x.contiguous(), 1, SumPass::kNoStep);
  if (!x.requires_grad()) return group.gather_in(x.contiguous(), 1, forward_pass());
  return GatherSequence::apply(x, &group);
}

at::Tensor scatter_sequence(const at::Tensor& y, TensorGroup& group) {
  if (!at::GradMode::is_enabled()) return group.sum_scatter_in(y, 1, SumPass::kNoStep);
  if (!y.requires_grad()) return group.sum_scatter_in(y, 1, forward_pass());
  return ScatterSequence::apply(y, &group);
}

at::Tensor gathered_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                           TensorGroup& group) {
  if (at::GradMode::is_enabled()) {
    return bias.defined() ? GatheredLinear::apply(x, weight, bias, &group)
                          : GatheredProduct::apply(x, weight, &group);
  }
  const at::Tensor part = x.to(product_type(x)).contiguous();
  return at::linear(group.gather_in(part, 1, SumPass::kNoStep), weight, bias);
}

at::Tensor whole_sequence(const at::Tensor& x, TensorGroup& group) {
  if (!at::GradMode::is_enabled()) return group.gather_in(x.contiguous(), 1, SumPass::kNoStep);
  if (!x.requires_grad()) return group.gather_in(x.contiguous(), 1, forward_pass());
  return WholeSequence::apply(x, &group);
}

at::Tensor own_positions(const at::Tensor& whole, TensorGroup& group) {
  const int64_t length = part_of(whole.size(1), group, "sequence split");
  // A copy even where the part is contiguous: a view would keep the whole alive.
  return whole.narrow(1, group.rank() * length, length).clone(at::MemoryFormat::Contiguous);
}

at::Tensor sequence_dropout(const at::Tensor& x, double p, bool train, TensorGroup& group) {
  if (!train || p == 0) return x;
  std::vector<int64_t> sizes = x.sizes().vec();
  sizes[1] *= group.size();
  // The mask one process draws for the whole sequence (per sample, draw_key.h).
  return x * own_positions(dropout_mask(sizes, p, x.options().requires_grad(false)), group);
}

at::Tensor slice_of(const at::Tensor& whole, const TensorSplit& split, int rank, int ranks) {
  const int64_t length = whole.size(split.dim);
  if (length % (split.sections * ranks) != 0) {
    throw Error("tensor parallel: a dimension of " + std::to_string(length) + " in " +
                std::to_string(split.sections) + " section(s) does not split over " +
                std::to_string(ranks) + " ranks");
  }
  const int64_t section = length / split.sections, part = section / ranks;
  std::vector<at::Tensor> parts;
  for (int64_t s = 0; s < split.sections; ++s) {
    parts.push_back(whole.narrow(split.dim, s * section + rank * part, part));
  }
  return at::cat(parts, split.dim).contiguous();
}

at::Tensor whole_of(const std::vector<at::Tensor>& slices, const TensorSplit& split) {
  const auto ranks = static_cast<int64_t>(slices.size());
  const int64_t part = slices.front().size(split.dim) / split.sections;
  std::vector<at::Tensor> parts;
  for (int64_t s = 0; s < split.sections; ++s) {
    for (int64_t r = 0; r < ranks; ++r)
      parts.push_back(slices[r].narrow(split.dim, s * part, part));
  }
  return at::cat(parts, split.dim).contiguous();
}

void keep_slice(at::Tensor& parameter, const TensorSplit& split, TensorGroup& group) {
  at::NoGradGuard no_grad;
  parameter.set_data(slice_of(parameter.detach(), split, group.rank(), group.size()));
}

}  // namespace loom::models
