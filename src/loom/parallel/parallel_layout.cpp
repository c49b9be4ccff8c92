#include "loom/parallel/parallel_layout.h"

#include "loom/comm/tensor_message.h"

#include <torch/nn/utils/clip_grad.h>

#include <nlohmann/json.hpp>

namespace loom::parallel {

void ParallelLayout::clip_gradients(double max_norm) {
  std::vector<at::Tensor> tensors;
  for (const auto& [name, p] : parameters_) tensors.push_back(p);
  torch::nn::utils::clip_grad_norm_(tensors, max_norm);
}

std::string ParallelLayout::manifest_json() const {
  return nlohmann::ordered_json{{"ranks", plan_.trainers}, {"data_parallel", plan_.replicas}}
      .dump();
}

LayoutReport ParallelLayout::report() {
  LayoutReport r;
  r.exchange = grad_sync_->describe();
  return r;
}

models::NamedTensors gather_on_rank0(comm::Communicator& comm, const models::NamedTensors& mine) {
  if (comm.rank() != 0) {
    comm::PendingSends sends;
    comm::send_named_tensors(comm, mine, 0, sends);
    sends.wait_all(comm.options().timeout);
    return {};
  }
  models::NamedTensors all = mine;
  for (int r = 1; r < comm.world(); ++r) {
    for (auto& named : comm::recv_named_tensors(comm, r)) all.push_back(std::move(named));
  }
  return all;
}

}  // namespace loom::parallel
