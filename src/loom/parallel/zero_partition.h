// ZeRO's partition of one replica's trainable parameters over the data-parallel ranks, laid out
// as DeepSpeed lays it: the parameters live back to back in flat buckets (the buckets their
// gradients are reduced in, in reverse registration order, the order backward makes them), each
// bucket padded to a multiple of the ranks and cut into equal shards; rank r owns shard r of every
// bucket. Per step:
//   - each full gradient bucket is reduce-scattered (ReduceScatterExchange): this rank receives
//     the mean of its shard only;
//   - the optimizer steps one flat tensor per bucket, the rank's shard of the parameters' own
//     memory, with that mean as its gradient;
//   - gather_parameters() all-gathers every rank's stepped shard into every rank's parameters.
// SGD, Adam and AdamW update each element on its own, so stepping shards is stepping the
// parameters; the optimizer state per rank is 1/ranks of the whole. Stage 1 keeps the full
// gradient buckets between steps; stage 2 frees each one once its reduce-scatter is done, so a
// rank holds its gradient shards only (DataParallel does the freeing).
//
// Checkpoints stay layout-independent: named_state() turns every rank's shard state into state
// under the parameters' names, and shard_state() cuts such state into this rank's shards.
//
// Threading: the training loop's thread.
#pragma once

#include <ATen/Tensor.h>

#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "loom/comm/communicator.h"
#include "loom/parallel/bucket_exchange.h"
#include "loom/parallel/bucket_plan.h"

namespace loom::parallel {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

class ZeroPartition {
 public:
  // `parameters` in the model's order; those that train (requires_grad) are partitioned, their
  // values moved into the flat buckets (the tensors stay the same objects, so the model sees no
  // change).
  // `stage` is 1 or 2. Each parameter named in `alone` gets a bucket of its own, so that its
  // shards cover the same elements wherever it is partitioned alike (a tied parameter's copies
  // on several pipeline stages: their gradient shards can then be summed).
  ZeroPartition(const NamedTensors& parameters, int rank, int ranks, const BucketLimits& limits,
                int stage, const std::set<std::string>& alone = {});

  int stage() const { return stage_; }
  int ranks() const { return ranks_; }
  std::size_t parameter_count() const { return parameters_.size(); }
  std::size_t bucket_count() const { return buckets_.size(); }
  // Indices into `parameters` per bucket, in bucket order; one bucket's.
  std::vector<std::vector<int>> bucket_plan() const;
  const std::vector<int>& parameters_in(std::size_t bucket) const {
    return buckets_[bucket].parameters;
  }
  // A bucket's elements, padding included (a multiple of ranks()), and where a parameter
  // starts in its bucket.
  std::int64_t bucket_numel(std::size_t bucket) const { return buckets_[bucket].numel; }
  std::int64_t offset_of(int parameter) const { return offsets_[parameter]; }

  // What the optimizer steps: this rank's shard of each bucket, named "zero.bucket<b>.rank<r>".
  const NamedTensors& shards() const { return shards_; }
  // Where a bucket's reduce-scatter leaves this rank's mean gradient.
  const at::Tensor& gradient_shard(std::size_t bucket) const { return buckets_[bucket].grad; }
  // The gradient shard of a parameter named in `alone`; and its elements there for any
  // parameter of `numel` elements over `ranks`.
  const at::Tensor& gradient_shard_of(const std::string& name) const;
  static std::int64_t shard_elements(std::int64_t numel, int ranks) {
    return (numel + ranks - 1) / ranks;
  }
  // Makes the gradient shards the shards' .grad (the optimizer may have cleared them).
  void attach_gradients();
  // Every rank's stepped shards into every rank's parameters; collective over `comm`.
  void gather_parameters(comm::Communicator& comm);
  // The names of the shards of the parameters in `alone` among `names` (a tied copy's, which
  // clipping leaves to the owner's rank).
  std::set<std::string> shards_of(const std::set<std::string>& names) const;

  // State under the parameters' names ("<param>.<field>", as export_optimizer_state writes it)
  // cut into this rank's shards' ("zero.bucket<b>.rank<r>.<field>"). Throws Error naming a
  // parameter whose field is missing or has the wrong shape.
  NamedTensors shard_state(const NamedTensors& named) const;
  // The inverse over every rank's shard state together (gathered on one rank).
  NamedTensors named_state(const NamedTensors& every_rank) const;

 private:
  struct Bucket {
    std::vector<int> parameters;
    std::int64_t numel = 0;  // padded
    at::Tensor values;       // the parameters, back to back
    at::Tensor grad;         // this rank's shard of the mean gradient
  };
  std::int64_t shard_numel(const Bucket& bucket) const { return bucket.numel / ranks_; }
  std::string shard_name(std::size_t bucket, int rank) const;

  int rank_, ranks_, stage_;
  NamedTensors parameters_;
  std::vector<Bucket> buckets_;
  std::vector<std::int64_t> offsets_;
  NamedTensors shards_;
};

// DataParallel's exchange under ZeRO: the mean of each bucket's shard lands on its owner.
class ReduceScatterExchange : public BucketExchange {
 public:
  ReduceScatterExchange(comm::Communicator& comm, const ZeroPartition& partition)
      : comm_(comm), partition_(partition) {}
  void buckets_changed(const std::vector<at::Tensor>&) override {}
  comm::WorkPtr start(std::size_t index, const at::Tensor& bucket) override {
    return comm_.reduce_scatter(bucket, partition_.gradient_shard(index), comm::ReduceOp::kAvg);
  }
  std::string describe() const override;

 private:
  comm::Communicator& comm_;
  const ZeroPartition& partition_;
};

// A tensor with `like`'s shape and strides over `flat`'s memory from element `offset` on. Not a
// view in autograd's sense: a parameter or gradient may be made of it.
at::Tensor alias_into(const at::Tensor& flat, std::int64_t offset, const at::Tensor& like);

}  // namespace loom::parallel
