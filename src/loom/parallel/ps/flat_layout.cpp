#include "loom/parallel/ps/flat_layout.h"

#include <ATen/ATen.h>

#include "loom/core/error.h"

namespace loom::parallel::ps {

FlatLayout::FlatLayout(const models::NamedTensors& parameters) {
  for (const auto& [name, p] : parameters) {
    if (p.scalar_type() != at::kFloat) {
      throw Error("ps: parameter '" + name + "' is " + c10::toString(p.scalar_type()) +
                  "; servers that hold the parameters keep them in float");
    }
    names_.push_back(name);
    shapes_.push_back(p.sizes().vec());
    offsets_.push_back(elements_);
    elements_ += p.numel();
  }
}

namespace {

// The device of the first defined tensor (the model's; the CPU when none is defined).
c10::Device device_of(const std::vector<at::Tensor>& tensors) {
  for (const at::Tensor& t : tensors) {
    if (t.defined()) return t.device();
  }
  return c10::kCPU;
}

}  // namespace

at::Tensor FlatLayout::flatten(const std::vector<at::Tensor>& tensors) const {
  if (tensors.size() != names_.size()) {
    throw Error("ps: " + std::to_string(tensors.size()) + " tensors for a layout of " +
                std::to_string(names_.size()) + " parameters");
  }
  // Laid out on the tensors' device and copied to host memory once: one wait for a GPU a
  // flatten, not one a tensor.
  const c10::Device device = device_of(tensors);
  at::Tensor flat = at::empty({elements_}, at::TensorOptions(at::kFloat).device(device));
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    at::Tensor into = slice(flat, i);
    if (tensors[i].defined()) {
      into.copy_(tensors[i]);
    } else {
      into.zero_();
    }
  }
  return flat.to(at::kCPU);
}

at::Tensor FlatLayout::slice(const at::Tensor& flat, std::size_t i) const {
  const std::int64_t n =
      i + 1 < offsets_.size() ? offsets_[i + 1] - offsets_[i] : elements_ - offsets_[i];
  return flat.narrow(0, offsets_[i], n).view(shapes_[i]);
}

void FlatLayout::scatter(const at::Tensor& flat, const std::vector<at::Tensor>& tensors) const {
  // Copied to the tensors' device once, then sliced there.
  const at::Tensor there = flat.to(device_of(tensors));
  for (std::size_t i = 0; i < tensors.size(); ++i) tensors[i].copy_(slice(there, i));
}

}  // namespace loom::parallel::ps
