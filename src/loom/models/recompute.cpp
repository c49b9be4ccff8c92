#include "loom/models/recompute.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/custom_class.h>

#include <memory>
#include <unordered_set>
#include <utility>
#include <vector>

#include "loom/core/autocast_scope.h"
#include "loom/models/draw_key.h"

namespace loom::models {
namespace {

using Forward = std::function<at::Tensor(const at::Tensor&)>;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The block's forward, kept alive by the autograd graph until its backward has run (the Block
// that made it may be gone by then).
struct ForwardHolder : torch::CustomClassHolder {
  explicit ForwardHolder(std::shared_ptr<const Forward> f) : run(std::move(f)) {}
  std::shared_ptr<const Forward> run;
};

// The block's forward under no_grad, and again with gradients in backward.
struct RecomputeFunction : public torch::autograd::Function<RecomputeFunction> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& input,
                               at::TensorList weights, std::shared_ptr<const Forward> run) {
    // The forward again replays the keyed draws this one makes (draw_key.h) from the state they
    // start in here, whatever the thread's state is when backward comes.
    auto replay =
        std::make_shared<const Forward>([run, draws = DrawKeyScope::state()](const at::Tensor& x) {
          const DrawKeyScope as_first(draws);
          return (*run)(x);
        });
    ctx->saved_data["forward"] =
        c10::IValue::make_capsule(c10::make_intrusive<ForwardHolder>(replay));
    ctx->saved_data["rng"] = at::detail::getDefaultCPUGenerator().get_state();
    // torch's own dropout on a GPU draws from that device's generator: its state too.
    if (input.is_cuda()) {
      ctx->saved_data["device_rng"] =
          at::globalContext().defaultGenerator(input.device()).get_state();
    }
    const AutocastState autocast = AutocastState::current();
    ctx->saved_data["autocast_cpu"] = autocast.cpu.enabled;
    ctx->saved_data["autocast_cpu_dtype"] = autocast.cpu.dtype;
    ctx->saved_data["autocast_cuda"] = autocast.cuda.enabled;
    ctx->saved_data["autocast_cuda_dtype"] = autocast.cuda.dtype;
    ctx->saved_data["weights"] = c10::List<at::Tensor>(weights.vec());
    ctx->save_for_backward({input});
    at::NoGradGuard no_grad;
    return {(*run)(input)};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto holder =
        c10::static_intrusive_pointer_cast<ForwardHolder>(ctx->saved_data["forward"].toCapsule());
    const at::Tensor saved = ctx->get_saved_variables()[0];
    const bool input_grad = saved.is_floating_point();
    at::Tensor x = saved.detach();
    if (input_grad) x.requires_grad_(true);
    // The forward again, drawing what it drew the first time; the generators then go on from
    // where backward found them.
    std::vector<std::pair<at::Generator, at::Tensor>> found;  // each generator, its state now
    const auto replay_from = [&found](at::Generator generator, const at::Tensor& state) {
      found.emplace_back(generator, generator.get_state());
      generator.set_state(state);
    };
    replay_from(at::detail::getDefaultCPUGenerator(), ctx->saved_data["rng"].toTensor());
    if (const auto it = ctx->saved_data.find("device_rng"); it != ctx->saved_data.end()) {
      replay_from(at::globalContext().defaultGenerator(saved.device()), it->second.toTensor());
    }
    at::Tensor y;
    {
      at::AutoGradMode enable(true);
      AutocastState as_saved;
      as_saved.cpu = {ctx->saved_data["autocast_cpu"].toBool(),
                      ctx->saved_data["autocast_cpu_dtype"].toScalarType()};
      as_saved.cuda = {ctx->saved_data["autocast_cuda"].toBool(),
                       ctx->saved_data["autocast_cuda_dtype"].toScalarType()};
      const AutocastScope autocast(as_saved);
      y = (*holder->run)(x);
    }
    for (auto& [generator, state] : found) generator.set_state(state);

    // Gradients for the input and every weight (undefined where the forward did not read it).
    variable_list wrt;
    if (input_grad) wrt.push_back(x);
    for (const at::Tensor& w : ctx->saved_data["weights"].toTensorList()) wrt.push_back(w);
    variable_list grads = torch::autograd::grad({y}, wrt, {grad_outputs[0]},
                                                /*retain_graph=*/false, /*create_graph=*/false,
                                                /*allow_unused=*/true);
    variable_list out;
    out.push_back(input_grad ? grads[0] : at::Tensor());
    out.insert(out.end(), grads.begin() + (input_grad ? 1 : 0), grads.end());
    out.emplace_back();  // the forward function
    return out;
  }
};

}  // namespace

Block recomputed(Block block, std::vector<at::Tensor> weights) {
  // The block's own parameters always, then the others it was given; each tensor once (a
  // duplicate would have its gradient returned, and added, twice).
  std::vector<at::Tensor> trainable;
  std::unordered_set<const void*> seen;
  const auto add = [&](const at::Tensor& w) {
    if (w.requires_grad() && seen.insert(w.unsafeGetTensorImpl()).second) trainable.push_back(w);
  };
  for (const auto& [name, p] : block.parameters) add(p);
  for (const at::Tensor& w : weights) add(w);
  auto run = std::make_shared<const Forward>(std::move(block.forward));
  block.forward = [run, trainable = std::move(trainable)](const at::Tensor& input) {
    if (!at::GradMode::is_enabled()) return (*run)(input);
    // As a TensorList, so that autograd sees the weights as the function's inputs.
    return RecomputeFunction::apply(input, at::TensorList(trainable), run)[0];
  };
  return block;
}

std::vector<Block> with_recompute(std::vector<Block> blocks, int64_t every) {
  if (every <= 0) return blocks;
  for (size_t i = 0; i + 1 < blocks.size(); ++i) {
    if ((i + 1) % static_cast<size_t>(every) != 0) continue;
    std::vector<at::Tensor> tied;
    for (const auto& [name, p] : blocks[i].tied) tied.push_back(p);
    blocks[i] = recomputed(std::move(blocks[i]), std::move(tied));
  }
  return blocks;
}

int64_t recompute_every(const TrainConfig& train) {
  if (train.activation_checkpointing == "blocks") return 1;
  if (train.activation_checkpointing == "every_k") return train.activation_checkpointing_k;
  return 0;
}

}  // namespace loom::models
