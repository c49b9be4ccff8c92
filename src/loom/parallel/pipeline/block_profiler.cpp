#include "loom/parallel/pipeline/block_profiler.h"

#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
#include <chrono>

#include "loom/core/autocast_scope.h"
#include "loom/core/error.h"
#include "loom/core/median.h"

namespace loom::parallel::pipeline {
namespace {

using Clock = std::chrono::steady_clock;

template <typename F>
double seconds_of(F&& f) {
  const auto start = Clock::now();
  f();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double bytes_of(const models::NamedTensors& tensors) {
  double bytes = 0;
  for (const auto& [name, t] : tensors) bytes += static_cast<double>(t.nbytes());
  return bytes;
}

// One block's measurements. `x` is its input (requiring a gradient unless it is the model's
// input); `last` adds the loss.
class BlockMeasurer {
 public:
  BlockMeasurer(const models::Block& block, const at::Tensor& labels, const models::Loss& loss,
                const BlockProfileOptions& options, const CachingCpuAllocator* allocator)
      : block_(block), labels_(labels), loss_(loss), options_(options), allocator_(allocator) {
    for (const auto* list : {&block.parameters, &block.tied}) {
      for (const auto& [name, p] : *list) {
        if (p.requires_grad()) weights_.push_back(p);
      }
    }
  }

  BlockProfile measure(const at::Tensor& x, bool last, at::Tensor& output) {
    BlockProfile p;
    p.name = block_.name;
    const bool needs_input_grad = x.requires_grad();
    std::vector<double> forward_times, full_times, input_times;
    for (int run = 0; run <= options_.repeats; ++run) {  // run 0 warms up
      const size_t before = allocator_ ? allocator_->stats().bytes_in_use : 0;
      at::Tensor out, y;  // the block's output; y adds the loss for the last block
      const double moved_before = tensor_bytes_moved();
      const double f = seconds_of([&] {
        AutocastScope autocast(options_.autocast);
        out = block_.forward(x);
        y = last ? loss_(out, labels_) : out;
      });
      const double moved_forward = tensor_bytes_moved();
      if (run == 1) {
        p.tensor_forward_bytes = moved_forward - moved_before;
        output = out.detach();
        p.output_bytes = static_cast<double>(output.nbytes());
        if (allocator_) {
          const double held = static_cast<double>(allocator_->stats().bytes_in_use) -
                              static_cast<double>(before) - static_cast<double>(y.nbytes());
          p.activation_bytes = std::max(0.0, held);
        }
      }
      const at::Tensor grad = last ? at::ones_like(y) : at::randn_like(y);
      std::vector<at::Tensor> everything = weights_;
      if (needs_input_grad) everything.push_back(x);
      const size_t before_backward = allocator_ ? allocator_->stats().bytes_in_use : 0;
      if (allocator_ && run == 1) allocator_->reset_peak();
      const double b = everything.empty() ? 0.0 : seconds_of([&] {
        torch::autograd::grad({y}, everything, {grad}, /*retain_graph=*/true);
      });
      if (run == 1) p.tensor_backward_bytes = tensor_bytes_moved() - moved_forward;
      if (allocator_ && run == 1) {
        p.backward_peak_bytes = static_cast<double>(allocator_->stats().peak_bytes_in_use) -
                                static_cast<double>(before_backward);
      }
      const double i =
          needs_input_grad
              ? seconds_of([&] { torch::autograd::grad({y}, {x}, {grad}, /*retain_graph=*/false); })
              : 0.0;
      if (run == 0) continue;
      forward_times.push_back(f);
      full_times.push_back(b);
      input_times.push_back(i);
    }
    p.forward_seconds = upper_median(forward_times);
    p.backward_input_seconds = std::min(upper_median(input_times), upper_median(full_times));
    p.backward_weight_seconds = upper_median(full_times) - p.backward_input_seconds;
    p.parameter_bytes = bytes_of(block_.parameters);
    p.buffer_bytes = bytes_of(block_.buffers);
    p.tied_parameter_bytes = bytes_of(block_.tied);
    for (const auto& [name, t] : block_.parameters) p.parameters += static_cast<double>(t.numel());
    return p;
  }

 private:
  const models::Block& block_;
  const at::Tensor& labels_;
  const models::Loss& loss_;
  const BlockProfileOptions& options_;
  const CachingCpuAllocator* allocator_;
  double tensor_bytes_moved() const {
    return options_.tensor_bytes_moved ? options_.tensor_bytes_moved() : 0.0;
  }

  std::vector<at::Tensor> weights_;
};

}  // namespace

std::vector<BlockProfile> profile_blocks(models::Model& model, const at::Tensor& input,
                                         const at::Tensor& labels, const models::Loss& loss,
                                         const BlockProfileOptions& options,
                                         const CachingCpuAllocator* allocator) {
  if (options.repeats < 1) throw Error("profile_blocks: repeats must be at least 1");
  const std::vector<models::Block> blocks = model.blocks();
  std::vector<BlockProfile> out;
  at::Tensor x = input;
  for (size_t i = 0; i < blocks.size(); ++i) {
    BlockMeasurer measurer(blocks[i], labels, loss, options, allocator);
    at::Tensor output;
    out.push_back(measurer.measure(x, i + 1 == blocks.size(), output));
    // The next block's input, as a stage would receive it: a leaf that wants its gradient.
    x = output.requires_grad_(true);
  }
  // Which block owns each block's tied parameters.
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (blocks[i].tied.empty()) continue;
    const std::string& name = blocks[i].tied.front().first;
    for (size_t owner = 0; owner < blocks.size(); ++owner) {
      for (const auto& [owned, p] : blocks[owner].parameters) {
        if (owned == name) out[i].tied_owner = static_cast<int>(owner);
      }
    }
  }
  // The model's parameters received gradients from nothing we keep: leave them unset.
  for (auto& [name, p] : model.named_parameters()) p.mutable_grad().reset();
  return out;
}

}  // namespace loom::parallel::pipeline
