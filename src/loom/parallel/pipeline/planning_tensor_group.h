// The tensor group the pipeline planner splits its model over (parallel.tensor with pipeline
// stages): rank 0 of `ranks`, alone. The planner then profiles each block as a stage's tensor
// rank runs it, its share of the products and of their activations and parameters measured
// rather than assumed to be 1/T; the group's collectives move nothing (each returns a tensor of
// the right shape) and count the bytes that a ring over the group would move for them, which
// the plan prices at the host's link speed.
//
// Threading: the planner's; not for training (the values it computes are not the model's).
#pragma once

#include <ATen/ATen.h>

#include <vector>

#include "loom/models/tensor_parallel.h"

namespace loom::parallel::pipeline {

class PlanningTensorGroup : public models::TensorGroup {
 public:
  PlanningTensorGroup(int ranks, bool sequence) : ranks_(ranks), sequence_(sequence) {}
  int rank() const override { return 0; }
  int size() const override { return ranks_; }
  bool splits_sequence() const override { return sequence_; }
  // A ring all-reduce sends and receives 2 (T - 1) / T of the tensor on each rank.
  void sum(at::Tensor& tensor) override { moved(2.0 * static_cast<double>(tensor.nbytes())); }
  // An all-gather and a reduce-scatter each move (T - 1) / T of the whole.
  at::Tensor gather_in(const at::Tensor& part, int64_t dim, models::SumPass) override {
    moved(static_cast<double>(part.nbytes()) * ranks_);
    return at::cat(std::vector<at::Tensor>(static_cast<size_t>(ranks_), part), dim);
  }
  at::Tensor sum_scatter_in(const at::Tensor& whole, int64_t dim, models::SumPass) override {
    moved(static_cast<double>(whole.nbytes()));
    return whole.narrow(dim, 0, whole.size(dim) / ranks_).contiguous();
  }

  // Bytes each rank would have moved so far.
  double bytes_moved() const { return bytes_; }

 private:
  void moved(double whole_bytes) {
    bytes_ += whole_bytes * static_cast<double>(ranks_ - 1) / static_cast<double>(ranks_);
  }

  int ranks_;
  bool sequence_;
  double bytes_ = 0;
};

}  // namespace loom::parallel::pipeline
