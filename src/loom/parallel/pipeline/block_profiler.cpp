#include "loom/parallel/pipeline/block_profiler.h"

#include <ATen/DeviceAccelerator.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
#include <chrono>

#include "loom/core/autocast_scope.h"
#include "loom/core/error.h"
#include "loom/core/median.h"

namespace loom::parallel::pipeline {
namespace {

using Clock = std::chrono::steady_clock;

// The bytes in use where the blocks run: the CPU's caching allocator's, or a GPU's.
class Memory {
 public:
  Memory(c10::Device device, const CachingCpuAllocator* cpu) : device_(device), cpu_(cpu) {}
  bool known() const { return !device_.is_cpu() || cpu_ != nullptr; }
  double in_use() const {
    if (!device_.is_cpu()) return static_cast<double>(device_stats().allocated_bytes[kAll].current);
    return cpu_ ? static_cast<double>(cpu_->stats().bytes_in_use) : 0.0;
  }
  double peak() const {
    if (!device_.is_cpu()) return static_cast<double>(device_stats().allocated_bytes[kAll].peak);
    return cpu_ ? static_cast<double>(cpu_->stats().peak_bytes_in_use) : 0.0;
  }
  void reset_peak() const {
    if (!device_.is_cpu()) {
      at::accelerator::resetPeakStats(device_.index());
    } else if (cpu_) {
      cpu_->reset_peak();
    }
  }

 private:
  static constexpr size_t kAll = 0;  // the statistics' aggregate over pool kinds
  at::CachingDeviceAllocator::DeviceStats device_stats() const {
    return at::accelerator::getDeviceStats(device_.index());
  }
  c10::Device device_;
  const CachingCpuAllocator* cpu_;
};

// Wall seconds of `f` on `device`: off the CPU, from the device's queue drained to its work for
// `f` done (the host only queues it).
template <typename F>
double seconds_of(c10::Device device, F&& f) {
  const auto drain = [device] {
    if (!device.is_cpu())
      c10::impl::VirtualGuardImpl(device.type()).synchronizeDevice(device.index());
  };
  drain();
  const auto start = Clock::now();
  f();
  drain();
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
                const BlockProfileOptions& options, const Memory& memory)
      : block_(block), labels_(labels), loss_(loss), options_(options), memory_(memory) {
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
      const double before = memory_.in_use();
      at::Tensor out, y;  // the block's output; y adds the loss for the last block
      const double moved_before = tensor_bytes_moved();
      const double f = seconds_of(options_.device, [&] {
        AutocastScope autocast(options_.autocast);
        out = block_.forward(x);
        y = last ? loss_(out, labels_) : out;
      });
      const double moved_forward = tensor_bytes_moved();
      if (run == 1) {
        p.tensor_forward_bytes = moved_forward - moved_before;
        output = out.detach();
        p.output_bytes = static_cast<double>(output.nbytes());
        if (memory_.known()) {
          const double held = memory_.in_use() - before - static_cast<double>(y.nbytes());
          p.activation_bytes = std::max(0.0, held);
        }
      }
      const at::Tensor grad = last ? at::ones_like(y) : at::randn_like(y);
      std::vector<at::Tensor> everything = weights_;
      if (needs_input_grad) everything.push_back(x);
      const double before_backward = memory_.in_use();
      if (memory_.known() && run == 1) memory_.reset_peak();
      const double b = everything.empty() ? 0.0 : seconds_of(options_.device, [&] {
        torch::autograd::grad({y}, everything, {grad}, /*retain_graph=*/true);
      });
      if (run == 1) p.tensor_backward_bytes = tensor_bytes_moved() - moved_forward;
      if (memory_.known() && run == 1) p.backward_peak_bytes = memory_.peak() - before_backward;
      const double i = needs_input_grad
                           ? seconds_of(options_.device,
                                        [&] {
                                          torch::autograd::grad({y}, {x}, {grad},
                                                                /*retain_graph=*/false);
                                        })
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
  const Memory& memory_;
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
  const Memory memory(options.device, options.device.is_cpu() ? allocator : nullptr);
  std::vector<BlockProfile> out;
  at::Tensor x = input;
  for (size_t i = 0; i < blocks.size(); ++i) {
    BlockMeasurer measurer(blocks[i], labels, loss, options, memory);
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
