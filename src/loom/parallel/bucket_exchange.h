// How DataParallel combines one full gradient bucket across the workers: the mean lands in the
// bucket in place. All-reduce among the workers is the default; parameter servers
// (ps/ps_bucket_exchange.h) push the bucket's parts to servers and pull the sums back. Everything
// else about data parallelism (hooks, bucket order, overlap with backward, accumulation,
// buffers) is the same for both, which is why this is the only piece that differs.
//
// Threading: called from DataParallel's thread only; the works run in the communicator.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "loom/comm/communicator.h"
#include "loom/parallel/grad_sync.h"

namespace loom::parallel {

class BucketExchange {
 public:
  virtual ~BucketExchange() = default;

  // The buckets were (re)built: the tensors start() will be given from now on, in bucket order.
  // Every worker calls it before the same step.
  virtual void buckets_changed(const std::vector<at::Tensor>& buckets) = 0;
  // Elements [offset, offset + elements) of bucket `index` hold this step's final gradient
  // (one call per gradient as backward produces it, before the bucket starts). An exchange may
  // begin moving what is complete; returns whether it started anything.
  virtual bool filled(std::size_t index, std::int64_t offset, std::int64_t elements) {
    return false;
  }
  // Starts combining bucket `index` of this step; buckets start in order, all of them every
  // synchronised step.
  virtual comm::WorkPtr start(std::size_t index, const at::Tensor& bucket) = 0;
  // Every bucket of the step has been waited for; `stats` may take what the exchange learnt.
  virtual void step_finished(SyncStats& stats) {}
  // What this exchange adds to the run's metrics of its own (grad_sync.h's metrics()).
  virtual LayoutMetrics* metrics() { return nullptr; }
  // After the last step (every worker calls it): servers learn that the workers are done.
  virtual void end_training() {}
  // "all-reduce over shm", "parameter servers: 12 parts of <= 4.0 MB over 2 servers: ...".
  virtual std::string describe() const = 0;
};

// The mean over `comm`'s ranks by all-reduce.
class AllReduceExchange : public BucketExchange {
 public:
  explicit AllReduceExchange(comm::Communicator& comm) : comm_(comm) {}
  void buckets_changed(const std::vector<at::Tensor>&) override {}
  comm::WorkPtr start(std::size_t, const at::Tensor& bucket) override {
    return comm_.allreduce(bucket, comm::ReduceOp::kAvg);
  }
  std::string describe() const override { return "all-reduce over " + comm_.backend(); }

 private:
  comm::Communicator& comm_;
};

}  // namespace loom::parallel
