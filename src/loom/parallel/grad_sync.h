// How gradients computed on one rank become the gradients every rank's optimizer applies. A
// ParallelLayout owns one (parallel_layout.h): its step executor calls zero_grad(), prepare() and
// finish(), and the training loop reaches it only through the layout (step_optimizer(),
// exchange_stats(), metrics(), end_training()); neither asks which kind it is: one process
// (LocalGradSync), data parallelism (DataParallel), whose full buckets are all-reduced,
// reduce-scattered into each rank's shard under ZeRO-1/2 (zero_partition.h) or pushed to
// parameter servers (bucket_exchange.h), and servers that hold the parameters
// (ps/remote_parameters.h). A script's own loop (loom.parallel)
// holds one made by make_replica_sync (replicated_layout.h).
//
// Per optimizer step: zero_grad(); then for each micro-batch prepare() before its forward, its
// backward, finish() after it; then step(). Under no_sync() backward only accumulates locally and
// the next synchronised backward exchanges the sum (gradient accumulation).
//
// Threading: all calls and the backward passes come from one thread.
#pragma once

#include <ATen/core/Tensor.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "loom/core/step_phase.h"
#include "loom/parallel/bucket_plan.h"

namespace loom::parallel {

class LayoutMetrics;  // layout_metrics.h (internal)

// What the last synchronised step's gradient exchange cost (all zero where nothing is exchanged).
struct SyncStats {
  int buckets = 0;
  std::size_t bytes = 0;
  double comm_seconds = 0;     // first exchange start to last exchange end
  double exposed_seconds = 0;  // finish() waiting: communication not hidden behind backward
  // Share of the communication hidden behind backward, 0..1.
  double overlap() const {
    return comm_seconds > 0 ? std::max(0.0, 1.0 - exposed_seconds / comm_seconds) : 0.0;
  }
};

// Optimizer state kept by parameter servers (parallel.ps.optimizer_on: server): each field
// (momentum_buffer, exp_avg, ...) as one flat fp32 tensor over the parameters in the model's
// order, and the optimizer steps taken. The trainer names them for checkpoints.
struct HeldOptimizerState {
  std::vector<at::Tensor> fields;
  std::int64_t steps = 0;
};

class GradSync {
 public:
  virtual ~GradSync() = default;

  // Clears the gradients for a new optimizer step.
  virtual void zero_grad() = 0;
  // Before a micro-batch's forward.
  virtual void prepare() = 0;
  // After its backward: the gradients are ready for the optimizer once it returns (when
  // synchronised). Throws Error when the exchange fails, naming the rank or parameter.
  virtual void finish() = 0;
  // Makes state outside the gradients (e.g. BatchNorm statistics) the same on every rank, as
  // before an evaluation split over the ranks.
  virtual void sync_buffers() = 0;
  // What the last synchronised step's exchange cost, as every kind of exchange counts it.
  virtual const SyncStats& last_stats() const = 0;
  // What this kind of exchange adds to the run's metrics of its own (the parameter servers' load
  // and staleness); null where nothing. Owned by the exchange.
  virtual LayoutMetrics* metrics() { return nullptr; }

  // The optimizer step, once the step's gradients are final. `local_step` runs this rank's
  // optimizer at learning rate `lr`. Servers that hold the parameters take over here: they apply
  // the gradients (or the delta `local_step` made) and send back the parameters to train on.
  virtual void step(double lr, const std::function<void()>& local_step) { local_step(); }
  // After the last step, before the final checkpoint and evaluation: every rank then holds the
  // final parameters.
  virtual void end_training() {}
  // Optimizer state that lives on servers, fetched for a checkpoint (rank 0 only, the parameters
  // are brought up to date too); nullopt where this rank's optimizer holds it all.
  virtual std::optional<HeldOptimizerState> held_optimizer_state() { return std::nullopt; }
  // How gradients are exchanged: "local", "all-reduce over shm", "parameter servers over ...".
  virtual std::string describe() const { return "local"; }
  // A loop that leaves finish() to the end of backward (DataParallelOptions::finish_in_backward)
  // hears there when the exchange is waited for: comm_exposed while it waits, other after.
  virtual void set_phase_sink(PhaseSink* sink) {}

  // The fusion-buffer limits, where this kind of exchange has buffers whose size is worth
  // tuning; nullopt otherwise.
  virtual std::optional<BucketLimits> bucket_limits() const { return std::nullopt; }
  // Regroups gradients under new limits from the next step on. Only where bucket_limits() has
  // a value; every rank must call it before the same step.
  virtual void set_bucket_limits(const BucketLimits& limits) {}

  // While alive, backward passes only accumulate gradients locally.
  class NoSync {
   public:
    explicit NoSync(GradSync& owner) : owner_(&owner) { owner_->sync_ = false; }
    ~NoSync() { owner_->sync_ = true; }
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    GradSync* owner_;
  };

 protected:
  bool sync_enabled() const { return sync_; }

 private:
  bool sync_ = true;
};

}  // namespace loom::parallel
