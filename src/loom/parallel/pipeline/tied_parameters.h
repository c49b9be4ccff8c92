// Parameters that blocks of different pipeline ranks share (a language model's token embedding,
// which its head reads again): each of those ranks keeps a copy and trains it, and after every
// step's backward the copies' gradients are summed, so that every copy takes the same optimizer
// step from the whole gradient and the copies stay equal (Megatron-LM's embedding group).
//
// The sum is one all-reduce over the pipeline's ranks, in which ranks without a copy (middle
// stages) take part with zeros: one collective every rank calls in the same order, without a
// group per pair of ranks.
//
// Threading: the training thread.
#pragma once

#include <ATen/Tensor.h>

#include <set>
#include <string>
#include <vector>

#include "loom/comm/communicator.h"
#include "loom/models/model.h"
#include "loom/parallel/pipeline/schedule.h"
#include "loom/parallel/zero_partition.h"

namespace loom::parallel::pipeline {

class TiedParameters {
 public:
  TiedParameters() = default;
  // Finds the parameters of `stages` that blocks on more than one pipeline rank read, before
  // keep_own_stages releases the others' tensors (their sizes are taken here).
  TiedParameters(const std::vector<std::vector<models::Block>>& stages, const Schedule& schedule,
                 int rank);

  bool empty() const { return entries_.empty(); }
  // The tied parameters, held here or not.
  std::set<std::string> names() const;
  // Adds every copy's gradient (collective over `pipeline`, the ranks of one pipeline). Under
  // ZeRO (`zero`, where each tied parameter has a bucket of its own) the copies' gradient shards
  // are added instead: the ranks of one pipeline have the same data-parallel rank, so their
  // shards cover the same elements. The sum is made on `device`, the pipeline's compute device
  // (of one type on every rank, holder or not), so that a GPU's gradients never wait for a copy
  // to the host.
  void sum_gradients(comm::Communicator& pipeline, const ZeroPartition* zero = nullptr,
                     c10::Device device = c10::kCPU) const;

 private:
  struct Entry {
    std::string name;
    at::Tensor tensor;  // this rank's copy; undefined where it holds none
    int64_t numel = 0;
    bool held = false;
  };
  std::vector<Entry> entries_;
};

}  // namespace loom::parallel::pipeline
