// A tensor known by its name, type and shape before its contents.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace loom {

// A file writer lays the file out from the names, types and shapes and then calls fetch() for
// each tensor in order, so that the contents can arrive one at a time (from another rank, say)
// rather than all be held at once. fetch() must give a tensor of that type and shape.
struct TensorToFetch {
  std::string name;
  at::ScalarType dtype = at::kFloat;
  std::vector<int64_t> sizes;
  std::function<at::Tensor()> fetch;

  int64_t nbytes() const {
    int64_t n = static_cast<int64_t>(c10::elementSize(dtype));
    for (int64_t s : sizes) n *= s;
    return n;
  }
};

}  // namespace loom
