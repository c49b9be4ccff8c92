// How one optimizer step's forward and backward work runs: one batch or several accumulated
// micro-batches (AccumulatingExecutor), or a rank's part of a pipeline schedule
// (pipeline/PipelineExecutor). A ParallelLayout owns its executor; the training loop asks the
// layout for a step (run_step) and then applies the optimizer, with no branch for the kind of
// parallelism.
#pragma once

#include <ATen/Tensor.h>

#include <cstdint>
#include <functional>
#include <optional>

#include "loom/core/step_phase.h"
#include "loom/models/draw_key.h"

namespace loom::parallel {

// One micro-batch as the model takes it: the input on the compute device, and the targets its
// loss compares the output with (labels [B], next tokens [B, T]); samples are along dim 0.
struct MicroBatch {
  at::Tensor input, targets;
  // The targets that count in the loss (not kIgnoredTarget), where the feeder counted them on the
  // host before the copy to the device (-1: add_targets counts them, which on a GPU waits for it).
  int64_t counted_targets = -1;
};
// Micro-batch k (0-based) of the step. An empty one (every sample of it was bad and skipped)
// has no forward or backward, but still takes part in the gradient exchange.
using MicroBatchSource = std::function<MicroBatch(int64_t k)>;

// What one step's forward and backward work gave, on this rank.
struct StepOutcome {
  // Each micro-batch's mean loss, summed in double where the losses were computed: the step does
  // not read it on the host (on a GPU, a read waits for the device and leaves it idle while the
  // host queues the rest). Undefined while no micro-batch counted.
  at::Tensor loss_sum;
  int64_t samples = 0;
  // Target positions the losses saw, and those of them that count (not kIgnoredTarget): the
  // trainer's mean over counted targets when some do not (models/loss.h). Counted only where
  // the executor is asked to (StartOptions::count_targets); zero otherwise.
  int64_t targets = 0, counted_targets = 0;

  // Adds a micro-batch's mean loss to loss_sum, without reading it.
  void add_loss(const at::Tensor& loss);
  // loss_sum read on the host (0 while none): for those that need the number now.
  double loss_sum_value() const;
};

// What the trainer sees of a running step: phase boundaries for its accounting and each forward
// pass (for the FLOP count). The losses come with the step's outcome, unread; the trainer reads
// them at its log lines and checkpoints. Called on the training thread.
class StepObserver : public PhaseSink {
 public:
  virtual void forward_begins() {}
  virtual void forward_ends(int64_t samples) {}
  // The samples micro-batch k holds, which key its dropout masks (models/draw_key.h) so that
  // every layout draws alike; none: masks from the generator as it stands.
  virtual std::optional<models::SampleKeys> draw_keys(int64_t k) const { return std::nullopt; }
};

// Adds a micro-batch's targets to `outcome`'s counts of targets and of those that count.
void add_targets(const MicroBatch& batch, StepOutcome& outcome);
// The targets of `targets` that count in the loss, read on the host.
int64_t counted_targets(const at::Tensor& targets);

class StepExecutor {
 public:
  virtual ~StepExecutor() = default;
  // Micro-batches one step reads.
  virtual int64_t micro_batches() const = 0;
  // Clears the gradients, runs every micro-batch's forward and backward, and leaves the
  // synchronised gradients ready for the optimizer.
  virtual StepOutcome run(const MicroBatchSource& micro_batch) = 0;

  // What backward starts from is the loss times `scale` from the next step on (fp16's loss
  // scaling, train/loss_scaler.h): the gradients come out scaled by it, the losses reported do
  // not. 1 by default.
  // An executor that wraps another passes it on.
  virtual void set_loss_scale(double scale) { loss_scale_ = scale; }

 protected:
  double loss_scale_ = 1.0;
};

}  // namespace loom::parallel
