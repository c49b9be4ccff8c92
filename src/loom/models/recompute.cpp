#include "loom/models/recompute.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/autocast_mode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include <memory>

#include "loom/core/autocast_scope.h"

namespace loom::models {
namespace {

using Forward = std::function<at::Tensor(const at::Tensor&)>;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The block's forward under no_grad, and again with gradients in backward. The forward function
// travels as an address: an autograd context keeps IValues, and the Block (which owns the
// function) outlives every backward of the steps it runs in.
struct RecomputeFunction : public torch::autograd::Function<RecomputeFunction> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& input,
                               at::TensorList weights, int64_t forward_address) {
    ctx->saved_data["forward"] = forward_address;
    ctx->saved_data["rng"] = at::detail::getDefaultCPUGenerator().get_state();
    ctx->saved_data["autocast"] = at::autocast::is_cpu_enabled();
    ctx->saved_data["weights"] = c10::List<at::Tensor>(weights.vec());
    ctx->save_for_backward({input});
    const auto& run = *reinterpret_cast<const Forward*>(forward_address);
    at::NoGradGuard no_grad;
    return {run(input)};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto& run = *reinterpret_cast<const Forward*>(ctx->saved_data["forward"].toInt());
    const at::Tensor saved = ctx->get_saved_variables()[0];
    const bool input_grad = saved.is_floating_point();
    at::Tensor x = saved.detach();
    if (input_grad) x.requires_grad_(true);
    // The forward again, drawing what it drew the first time; the generator then goes on from
    // where backward found it.
    at::Generator generator = at::detail::getDefaultCPUGenerator();
    const at::Tensor now = generator.get_state();
    generator.set_state(ctx->saved_data["rng"].toTensor());
    at::Tensor y;
    {
      at::AutoGradMode enable(true);
      AutocastScope autocast(ctx->saved_data["autocast"].toBool());
      y = run(x);
    }
    generator.set_state(now);

    // Gradients for the input and every weight the forward read (undefined where unused).
    variable_list wrt;
    if (input_grad) wrt.push_back(x);
    for (const at::Tensor& w : ctx->saved_data["weights"].toTensorList()) wrt.push_back(w);
    variable_list grads = torch::autograd::grad({y}, wrt, {grad_outputs[0]},
                                                /*retain_graph=*/false, /*create_graph=*/false,
                                                /*allow_unused=*/true);
    variable_list out;
    out.push_back(input_grad ? grads[0] : at::Tensor());
    out.insert(out.end(), grads.begin() + (input_grad ? 1 : 0), grads.end());
    out.emplace_back();  // the forward's address
    return out;
  }
};

}  // namespace

Block recomputed(Block block, std::vector<at::Tensor> weights) {
  std::vector<at::Tensor> trainable;
  for (const at::Tensor& w : weights) {
    if (w.requires_grad()) trainable.push_back(w);
  }
  auto run = std::make_shared<Forward>(std::move(block.forward));
  block.forward = [run, trainable = std::move(trainable)](const at::Tensor& input) {
    if (!at::GradMode::is_enabled()) return (*run)(input);
    // As a TensorList, so that autograd sees the weights as the function's inputs.
    return RecomputeFunction::apply(input, at::TensorList(trainable),
                                    reinterpret_cast<int64_t>(run.get()))[0];
  };
  return block;
}

}  // namespace loom::models
