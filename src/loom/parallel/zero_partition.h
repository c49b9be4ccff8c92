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
// Stage 3 shards the parameters too: each rank keeps its shards in memory of their own, and a
// bucket's parameters are whole only between gather_bucket() and release_bucket() (ShardedModel
// gathers a block's just before it runs). Their memory is freed and allocated again under the
// same tensors, so that autograd's saved references to them see the gathered values in
// backward, as FSDP does. The buckets then follow the model's blocks (`units`), one a block.
// Frozen parameters (requires_grad off: a LoRA fine-tune's base) are sharded too, in buckets of
// their own after the trained ones (a block's frozen ones make one), which have no gradient and
// no optimizer state: a rank holds 1/ranks of the base model between uses, as FSDP does with
// LoRA. Below stage 3 the frozen parameters stay whole and outside the partition.
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
  // `parameters` in the model's order; those that train (requires_grad) are partitioned (at
  // stage 3 the frozen ones too), their values moved into the flat buckets (the tensors stay the
  // same objects, so the model sees no change).
  // `stage` is 1, 2 or 3. Each parameter named in `alone` gets a bucket of its own, so that its
  // shards cover the same elements wherever it is partitioned alike (a tied parameter's copies
  // on several pipeline stages: their gradient shards can then be summed). The trainable
  // parameters of each of `units` (by name: a model's blocks, in forward order) make one bucket,
  // the last unit's first (backward's order); the others are planned by `limits` after them.
  ZeroPartition(const NamedTensors& parameters, int rank, int ranks, const BucketLimits& limits,
                int stage, const std::set<std::string>& alone = {},
                const std::vector<std::vector<std::string>>& units = {});
  // Lets gathers still under way finish (their buffers are this object's).
  ~ZeroPartition();

  int stage() const { return stage_; }
  int rank() const { return rank_; }
  int ranks() const { return ranks_; }
  // The partitioned parameters that train: the first trained_parameter_count() of parameters().
  std::size_t trained_parameter_count() const { return trained_parameters_; }
  // Every bucket (stage 3: the frozen ones after those that train), and those that train: the
  // first trained_bucket_count(), which have gradient shards and optimizer shards.
  std::size_t bucket_count() const { return buckets_.size(); }
  std::size_t trained_bucket_count() const { return trained_buckets_; }
  bool trains(std::size_t bucket) const { return bucket < trained_buckets_; }
  // Indices into `parameters` per bucket that trains, in bucket order (gradient buckets); any
  // bucket's.
  std::vector<std::vector<int>> bucket_plan() const;
  const std::vector<int>& parameters_in(std::size_t bucket) const {
    return buckets_[bucket].parameters;
  }
  // A bucket's elements, padding included (a multiple of ranks()), and where a parameter
  // starts in its bucket.
  std::int64_t bucket_numel(std::size_t bucket) const { return buckets_[bucket].numel; }
  std::int64_t offset_of(int parameter) const { return offsets_[parameter]; }
  // The partitioned parameters, those that train in the model's order and then (stage 3) the
  // frozen ones in the model's order; and their buckets.
  const NamedTensors& parameters() const { return parameters_; }
  std::size_t bucket_of(int parameter) const { return bucket_of_[parameter]; }
  // The index of the partitioned parameter of that name; -1 for none (a frozen one below
  // stage 3).
  int index_of(const std::string& name) const;

  // What the optimizer steps: this rank's shard of each bucket that trains, named
  // "zero.bucket<b>.rank<r>".
  const NamedTensors& shards() const { return shards_; }
  // Where a trained bucket's reduce-scatter leaves this rank's mean gradient.
  const at::Tensor& gradient_shard(std::size_t bucket) const { return buckets_[bucket].grad; }
  // The gradient shard of a parameter named in `alone`; and its elements there for any
  // parameter of `numel` elements over `ranks`.
  const at::Tensor& gradient_shard_of(const std::string& name) const;
  static std::int64_t shard_elements(std::int64_t numel, int ranks) {
    return (numel + ranks - 1) / ranks;
  }
  // This rank's mean gradient shards, cut where the parameters meet: each part of a shard that
  // holds one parameter's elements, with that parameter's index (padding left out).
  std::vector<std::pair<int, at::Tensor>> gradient_pieces() const;
  // Makes the gradient shards the shards' .grad (the optimizer may have cleared them).
  void attach_gradients();
  // Every rank's stepped shards into every rank's parameters; collective over `comm`. Stage 3:
  // and they stay whole from then on (the end of training).
  void gather_parameters(comm::Communicator& comm);

  // Stage 3 (see the class comment).
  bool shards_parameters() const { return stage_ == 3; }
  // Copies this rank's shard of every bucket out of the whole parameters (the values every
  // rank starts from) and frees the rest; once, before training.
  void shard_parameters();
  // Starts the all-gather of every rank's shard into the bucket's parameters, unless they are
  // whole or on their way; collective over `comm`, in the same order on every rank.
  void gather_bucket(std::size_t bucket, comm::Communicator& comm);
  // Waits for the bucket's gather (gather_bucket() first).
  void wait_whole(std::size_t bucket, comm::Communicator& comm);
  // Waits for the bucket's gather if one is under way (the bucket is then whole).
  void wait_if_gathering(std::size_t bucket, comm::Communicator& comm);
  // Frees the bucket's whole parameters, its shard kept (nothing once gather_parameters() ran).
  void release_bucket(std::size_t bucket);
  bool whole(std::size_t bucket) const { return buckets_[bucket].whole; }
  // This rank's shard of a bucket's parameters (stage 3: its own memory; else in the bucket).
  const at::Tensor& parameter_shard(std::size_t bucket) const { return buckets_[bucket].shard; }

  // State under the parameters' names ("<param>.<field>", as export_optimizer_state writes it)
  // cut into this rank's shards' ("zero.bucket<b>.rank<r>.<field>"). Throws Error naming a
  // parameter whose field is missing or has the wrong shape.
  NamedTensors shard_state(const NamedTensors& named) const;
  // The inverse over every rank's shard state together (gathered on one rank).
  NamedTensors named_state(const NamedTensors& every_rank) const;

 private:
  struct Bucket {
    std::vector<int> parameters;
    std::int64_t numel = 0;   // padded
    at::Tensor values;        // the parameters, back to back (stage 3: while whole)
    at::Tensor shard;         // this rank's part of them (trained: the optimizer's leaf)
    at::Tensor grad;          // this rank's shard of the mean gradient (trained buckets)
    bool whole = true;        // stage 3: `values` holds memory
    comm::WorkPtr gathering;  // stage 3: the gather into `values` under way
  };
  // The buckets of the parameters that train, or of the frozen ones.
  std::vector<std::vector<int>> plan_buckets_of(const BucketLimits& limits,
                                                const std::set<std::string>& alone,
                                                const std::vector<std::vector<std::string>>& units,
                                                bool trained);
  std::int64_t values_bytes(const Bucket& bucket) const;
  std::int64_t shard_numel(const Bucket& bucket) const { return bucket.numel / ranks_; }
  std::string shard_name(std::size_t bucket, int rank) const;

  int rank_, ranks_, stage_;
  NamedTensors parameters_;
  std::size_t trained_parameters_ = 0;
  std::size_t trained_buckets_ = 0;
  std::vector<Bucket> buckets_;
  std::vector<std::int64_t> offsets_;
  std::vector<std::size_t> bucket_of_;
  NamedTensors shards_;
  bool pinned_ = false;  // stage 3: whole for good (gather_parameters())
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
