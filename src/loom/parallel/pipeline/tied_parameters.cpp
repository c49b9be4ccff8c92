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

void TiedParameters::sum_gradients(comm::Communicator& pipeline) const {
  int64_t total = 0;
  for (const Entry& e : entries_) total += e.numel;
  at::Tensor flat = at::zeros({total}, at::kFloat);
  int64_t offset = 0;
  for (const Entry& e : entries_) {
    if (e.held && e.tensor.grad().defined()) {
      flat.narrow(0, offset, e.numel).copy_(e.tensor.grad().reshape({-1}));
    }
    offset += e.numel;
  }
  pipeline.allreduce(flat, comm::ReduceOp::kSum)->wait(pipeline.options().timeout);
  offset = 0;
  for (const Entry& e : entries_) {
    if (e.held) {
      at::Tensor summed = flat.narrow(0, offset, e.numel).view(e.tensor.sizes());
      if (e.tensor.grad().defined()) {
        e.tensor.mutable_grad().copy_(summed);
      } else {
        e.tensor.mutable_grad() = summed.to(e.tensor.scalar_type()).clone();
      }
    }
    offset += e.numel;
  }
}

}  // namespace loom::parallel::pipeline
