#include "loom/parallel/parallel_layout.h"

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

}  // namespace loom::parallel
