// The checks of the collectives that take two tensors, shared by the backends: both tensors as
// check_tensor wants them, and sizes and types that agree. Throw CommError naming the operation.
#pragma once

#include <ATen/core/Tensor.h>

namespace loom::comm {

// output holds world x input's elements, of input's type.
void check_allgather(const at::Tensor& input, const at::Tensor& output, int rank, int world);
// input holds world x output's elements, of output's type.
void check_reduce_scatter(const at::Tensor& input, const at::Tensor& output, int rank, int world);

}  // namespace loom::comm
