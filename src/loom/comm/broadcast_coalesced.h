// Rank 0's values of many small tensors to every rank, one flat message per element type rather
// than one broadcast per tensor (BatchNorm statistics, a model's first parameters).
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "loom/comm/communicator.h"

namespace loom::comm {

// Collective: every rank passes tensors of the same shapes and types, in the same order.
void broadcast_coalesced(const std::vector<at::Tensor>& tensors, Communicator& comm);

}  // namespace loom::comm
