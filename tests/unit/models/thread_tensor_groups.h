// A tensor group of ranks as threads of this process, summing through shared memory: what the
// models' tensor-parallel tests split their layers over (the base TensorGroup makes the
// sequence split's gathers and reduce-scatters of these sums).
#pragma once

#include <ATen/ATen.h>

#include <condition_variable>
#include <mutex>
#include <vector>

#include "loom/models/tensor_parallel.h"

namespace loom::models {

class ThreadGroups {
 public:
  // Rank `rank`'s view of the group; `sequence`: the layers split the sequence too.
  class Group : public TensorGroup {
   public:
    Group(ThreadGroups& all, int rank, bool sequence = false)
        : all_(all), rank_(rank), sequence_(sequence) {}
    int rank() const override { return rank_; }
    int size() const override { return static_cast<int>(all_.parts_.size()); }
    void sum(at::Tensor& tensor) override { all_.sum(rank_, tensor); }
    bool splits_sequence() const override { return sequence_; }

   private:
    ThreadGroups& all_;
    int rank_;
    bool sequence_;
  };

  explicit ThreadGroups(int ranks) : parts_(static_cast<size_t>(ranks)) {}

  // Blocks until every rank has handed its tensor in; each then holds the sum.
  void sum(int rank, at::Tensor& tensor) {
    std::unique_lock<std::mutex> lock(mutex_);
    const int round = round_;
    parts_[static_cast<size_t>(rank)] = tensor.clone();
    if (++arrived_ == static_cast<int>(parts_.size())) {
      total_ = parts_[0].clone();
      for (size_t r = 1; r < parts_.size(); ++r) total_ += parts_[r];
      arrived_ = 0;
      ++round_;
      changed_.notify_all();
    } else {
      changed_.wait(lock, [&] { return round_ != round; });
    }
    tensor.copy_(total_);
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<at::Tensor> parts_;
  at::Tensor total_;
  int arrived_ = 0, round_ = 0;
};

}  // namespace loom::models
