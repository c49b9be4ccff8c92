#include "loom/comm/broadcast_coalesced.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <map>

namespace loom::comm {

void broadcast_coalesced(const std::vector<at::Tensor>& tensors, Communicator& comm) {
  std::map<c10::ScalarType, std::vector<at::Tensor>> by_type;
  for (const auto& t : tensors) by_type[t.scalar_type()].push_back(t);
  at::NoGradGuard no_grad;
  for (auto& [type, group] : by_type) {
    std::vector<at::Tensor> flat_parts;
    for (const auto& t : group) flat_parts.push_back(t.reshape({-1}));
    at::Tensor flat = at::cat(flat_parts);
    comm.broadcast(flat, 0)->wait(comm.options().timeout);
    std::int64_t offset = 0;
    for (auto& t : group) {
      t.copy_(flat.narrow(0, offset, t.numel()).view(t.sizes()));
      offset += t.numel();
    }
  }
}

}  // namespace loom::comm
