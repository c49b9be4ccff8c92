// The parameters of a model laid end to end in one flat fp32 vector, in the model's order: how
// servers that hold the parameters see them (param_server.h). Each tensor occupies its elements
// in logical (row-major) order whatever its memory format, so a flat vector means the same on
// every worker and turns back into tensors of the model's shapes.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "loom/models/model.h"

namespace loom::parallel::ps {

class FlatLayout {
 public:
  // Throws Error naming a parameter that is not fp32 (servers keep one element type).
  explicit FlatLayout(const models::NamedTensors& parameters);

  std::int64_t elements() const { return elements_; }
  std::size_t size() const { return names_.size(); }
  const std::string& name(std::size_t i) const { return names_[i]; }

  // `tensors` (one per parameter, the parameters' shapes; undefined counts as zeros) end to end,
  // in host memory whichever device they are on.
  at::Tensor flatten(const std::vector<at::Tensor>& tensors) const;
  // Tensor i of `flat`, in the shape of parameter i (a view).
  at::Tensor slice(const at::Tensor& flat, std::size_t i) const;
  // Copies `flat` into the tensors (which keep their memory formats).
  void scatter(const at::Tensor& flat, const std::vector<at::Tensor>& tensors) const;

 private:
  std::vector<std::string> names_;
  std::vector<std::vector<std::int64_t>> shapes_;
  std::vector<std::int64_t> offsets_;
  std::int64_t elements_ = 0;
};

}  // namespace loom::parallel::ps
