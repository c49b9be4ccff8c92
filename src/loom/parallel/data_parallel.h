// Synchronous data parallelism for any module given as named parameters and buffers (a
// torch::nn module or a TorchScript one): every rank computes gradients on its own part of the
// global batch and DataParallel averages them across ranks while backward still runs, by
// all-reduce or through parameter servers (bucket_exchange.h).
//
// How: gradients live in flat buckets: each parameter's .grad becomes an alias of its slice of
// a bucket as soon as autograd produces it (one copy), so the all-reduce needs no copies in or
// out and the optimizer reads the reduced values in place. A hook on each parameter's gradient
// accumulator counts the gradients a bucket still waits for; when a bucket is complete and all
// buckets before it have been started, its all-reduce starts, overlapping the rest of backward.
// The exchange also hears of every gradient as it lands, so that parameter servers can push a
// bucket's complete parts before the bucket is full.
// Buckets start in bucket order on every rank, which keeps the ranks' collectives in the same
// order. After the first step the buckets are rebuilt in the order gradients actually became ready
// (rank 0's order, shared with all).
//
// Per step: zero_grad(), prepare() before forward, backward, finish() before the optimizer.
// Under no_sync() gradients only accumulate (gradient accumulation); the next synchronised
// backward reduces the sum.
//
// Threading: all calls and the backward pass come from one thread; the communicator runs the
// all-reduces in the background.
#pragma once

#include <ATen/Tensor.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "loom/comm/communicator.h"
#include "loom/core/config.h"
#include "loom/parallel/bucket_exchange.h"
#include "loom/parallel/bucket_plan.h"
#include "loom/parallel/grad_sync.h"
#include "loom/parallel/zero_partition.h"

namespace loom::parallel {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

struct DataParallelOptions {
  BucketLimits buckets;
  // Parameters that get no gradient in a backward are tolerated (their gradient counts as
  // zero). Off: such a step fails and names them, as the usual cause is a bug.
  bool find_unused_parameters = false;
  // Buffers (e.g. BatchNorm statistics) are copied from rank 0 before every forward.
  bool broadcast_buffers = true;
  // Reduce buckets in this type (bf16 or fp16) to halve the bytes moved; nullopt: as they are.
  std::optional<c10::ScalarType> compression;
  // finish() runs by itself when a synchronised backward ends (autograd's final callback), for
  // a training loop that calls its optimizer directly, as with torch's DistributedDataParallel.
  bool finish_in_backward = false;
  // ZeRO (zero_partition.h, made over the parameters that train, in the given order; not
  // owned): the buckets are the partition's, reduce-scattered into its gradient shards, and
  // step() all-gathers the stepped shards. Stage 2 frees each gradient bucket once its
  // reduce-scatter is done (stage 3 too, whose parameters ShardedModel gathers). Null: every
  // rank reduces and steps everything.
  ZeroPartition* zero = nullptr;
};

// parallel.* (buckets, unused parameters, buffers, compression) as data parallelism's options,
// for `loom train` and Python's loom.parallel.DataParallel alike.
DataParallelOptions data_parallel_options(const ParallelConfig& config);

class DataParallel : public GradSync {
 public:
  // Checks that every rank holds the same tensors (same_model_check.h, naming the first
  // difference), copies rank 0's parameters and buffers to every rank, then attaches the hooks.
  // `comm` (the workers) must outlive this object. Full buckets are combined by `exchange`, or by
  // all-reduce over `comm` when null.
  DataParallel(NamedTensors parameters, NamedTensors buffers, comm::Communicator& comm,
               DataParallelOptions options = {},
               std::unique_ptr<BucketExchange> exchange = nullptr);
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  void zero_grad() override;
  // Before forward: shares buffers, arms the buckets (and rebuilds them after the first step).
  void prepare() override;
  // After backward: starts what has not started, waits for all, checks every gradient came.
  // Throws Error naming parameters without a gradient (unless find_unused_parameters).
  void finish() override;

  // Copies rank 0's floating-point buffers (e.g. BatchNorm statistics) to every rank, as
  // prepare() does before each forward: before evaluating, so that every rank's part of the test
  // set sees rank 0's model.
  void sync_buffers() override;

  void set_phase_sink(PhaseSink* sink) override { phases_ = sink; }
  // Under ZeRO the buckets are the partition's, fixed for the run.
  std::optional<BucketLimits> bucket_limits() const override {
    return options_.zero ? std::nullopt : std::optional<BucketLimits>(options_.buckets);
  }
  // Regroups the gradients under new limits at the next prepare(), keeping the bucket order.
  // Changes the collectives a step makes, so every rank must call it before the same step.
  void set_bucket_limits(const BucketLimits& limits) override;

  const SyncStats& last_stats() const override { return stats_; }
  LayoutMetrics* metrics() override { return exchange_->metrics(); }
  std::string describe() const override;
  // ZeRO: this rank's optimizer steps its shards, then every rank's go to the others.
  void step(double lr, const std::function<void()>& local_step) override;
  // ZeRO-3: every rank then holds the whole parameters again, for good.
  void end_training() override;
  // Parameter names per bucket, in bucket order.
  std::vector<std::vector<std::string>> bucket_names() const;
  comm::Communicator& communicator() { return comm_; }

 private:
  struct Bucket;
  // What a bucket's exchange moves: its compressed copy, or the gradients themselves.
  static const at::Tensor& wire_of(const Bucket& bucket);
  class ReadyHook;

  void broadcast_initial_state(const NamedTensors& parameters);
  void build_buckets(const std::vector<int>& order);
  void on_gradient_ready(int parameter);
  void start_ready_buckets();
  void zero_gradient(int parameter);
  // ZeRO-2 allocates a bucket when its first gradient lands and frees it once reduced.
  void ensure_bucket_memory(std::size_t bucket);
  void release_bucket(std::size_t bucket);
  void release_reduced_buckets();
  void start(std::size_t bucket);
  void mark_started();  // notes when this step's exchange began
  std::vector<int> shared_ready_order();

  NamedTensors parameters_;  // only those that require a gradient
  NamedTensors buffers_;
  comm::Communicator& comm_;
  DataParallelOptions options_;
  std::unique_ptr<BucketExchange> exchange_;

  std::vector<Bucket> buckets_;
  std::vector<int> bucket_of_;                  // parameter -> bucket
  std::vector<std::int64_t> offset_in_bucket_;  // parameter -> its first element there
  std::vector<at::Tensor> aliases_;             // parameter -> its gradient's slice of its bucket
  std::vector<std::shared_ptr<void>> accumulators_;  // autograd nodes holding our hooks
  std::vector<std::uintptr_t> hook_keys_;

  bool rebuilt_ = false;
  bool limits_changed_ = false;
  std::vector<int> bucket_order_;  // the order the buckets were last built in
  std::vector<int> ready_order_;   // first step: the order gradients became ready
  std::vector<char> ready_;        // this step, per parameter
  int gradients_seen_ = 0;
  std::size_t next_bucket_ = 0;  // buckets before it have started
  std::size_t released_ = 0;     // ZeRO-2: buckets before it are freed this step
  bool started_ = false;         // this step's exchange has begun, at first_start_
  bool finish_queued_ = false;   // finish_in_backward: this backward's finish() is queued
  PhaseSink* phases_ = nullptr;  // set_phase_sink
  std::chrono::steady_clock::time_point first_start_;
  SyncStats stats_;
};

}  // namespace loom::parallel
