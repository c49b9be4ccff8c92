#include "loom/parallel/pipeline/tied_parameters.h"

#include <ATen/ATen.h>

#include <map>
#include <set>

namespace loom::parallel::pipeline {

TiedParameters::TiedParameters(const std::vector<std::vector<models::Block>>& stages,
                               const Schedule& schedule, int rank) {
  // Which ranks read each tied parameter: its owner's and its readers'.
  std::map<std::string, std::set<int>> readers;
  std::map<std::string, at::Tensor> tensors;
  for (size_t s = 0; s < stages.size(); ++s) {
    for (const models::Block& b : stages[s]) {
      for (const auto& [name, p] : b.tied) {
        readers[name].insert(schedule.stage_rank[s]);
        tensors[name] = p;
      }
    }
  }
  if (readers.empty()) return;
  for (size_t s = 0; s < stages.size(); ++s) {
    for (const models::Block& b : stages[s]) {
      for (const auto& [name, p] : b.parameters) {
        if (readers.count(name)) readers[name].insert(schedule.stage_rank[s]);
      }
    }
  }
  for (const auto& [name, ranks] : readers) {
    if (ranks.size() < 2) continue;  // one rank holds every reader: nothing to sum
    Entry e;
    e.name = name;
    e.numel = tensors[name].numel();
    e.held = ranks.count(rank) > 0;
    if (e.held) e.tensor = tensors[name];
    entries_.push_back(std::move(e));
  }
}

std::set<std::string> TiedParameters::names() const {
  std::set<std::string> out;
  for (const Entry& e : entries_) out.insert(e.name);
  return out;
}

void TiedParameters::sum_gradients(comm::Communicator& pipeline, const ZeroPartition* zero,
                                   c10::Device device) const {
  // What each entry adds: its whole gradient, or this data-parallel rank's shard of it (the
  // same element count on every rank of the pipeline; held or not).
  std::vector<int64_t> elements;
  std::vector<at::Tensor> gradients;
  int64_t total = 0;
  for (const Entry& e : entries_) {
    elements.push_back(zero ? ZeroPartition::shard_elements(e.numel, zero->ranks()) : e.numel);
    gradients.push_back(!e.held ? at::Tensor()
                        : zero  ? zero->gradient_shard_of(e.name)
                                : e.tensor.grad());
    total += elements.back();
  }
  at::Tensor flat = at::zeros({total}, at::TensorOptions().dtype(at::kFloat).device(device));
  int64_t offset = 0;
  for (size_t i = 0; i < entries_.size(); ++i) {
    if (gradients[i].defined()) {
      flat.narrow(0, offset, elements[i]).copy_(gradients[i].reshape({-1}));
    }
    offset += elements[i];
  }
  pipeline.allreduce(flat, comm::ReduceOp::kSum)->wait(pipeline.options().timeout);
  offset = 0;
  for (size_t i = 0; i < entries_.size(); ++i) {
    const Entry& e = entries_[i];
    const at::Tensor summed = flat.narrow(0, offset, elements[i]);
    offset += elements[i];
    if (!e.held) continue;
    if (gradients[i].defined()) {
      gradients[i].copy_(summed.view(gradients[i].sizes()));
    } else {
      // A copy in the parameter's type (the sum is a float tensor).
      e.tensor.mutable_grad() =
          summed.view(e.tensor.sizes()).to(e.tensor.options(), false, /*copy=*/true);
    }
  }
}

}  // namespace loom::parallel::pipeline
