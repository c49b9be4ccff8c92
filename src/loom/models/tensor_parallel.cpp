#include "loom/models/tensor_parallel.h"

#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/graph_task.h>

#include "loom/core/error.h"

namespace loom::models {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

TensorGroup* group_of(AutogradContext* ctx) {
  return reinterpret_cast<TensorGroup*>(ctx->saved_data["group"].toInt());
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
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t group) {
    ctx->saved_data["group"] = group;
    return x.view_as(x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {summed(grads[0], *group_of(ctx), SumPass::kBackward), at::Tensor()};
  }
};

struct LeaveSplit : public torch::autograd::Function<LeaveSplit> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& y, int64_t group) {
    return summed(y, *reinterpret_cast<TensorGroup*>(group), forward_pass());
  }
  static variable_list backward(AutogradContext*, variable_list grads) {
    return {grads[0], at::Tensor()};
  }
};

int64_t as_int(TensorGroup& group) { return reinterpret_cast<int64_t>(&group); }

}  // namespace

at::Tensor enter_split(const at::Tensor& x, TensorGroup& group) {
  if (!at::GradMode::is_enabled() || !x.requires_grad()) return x;
  return EnterSplit::apply(x, as_int(group));
}

at::Tensor leave_split(const at::Tensor& y, TensorGroup& group) {
  if (!at::GradMode::is_enabled()) return summed(y, group, SumPass::kNoStep);
  if (!y.requires_grad()) return summed(y, group, forward_pass());
  return LeaveSplit::apply(y, as_int(group));
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
