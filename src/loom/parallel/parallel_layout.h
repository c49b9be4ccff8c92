// The seam between a training loop and how the job's ranks share its work. The loop (train/'s
// TrainingRun, and through it `loom train`, `loom.train()` and an embedding program) holds one
// ParallelLayout and never asks which it is: one process, all-reduce data parallelism (ZeRO
// 0-3), parameter servers (sync, async, SSP), pipelines, and tensor groups, composed as the
// plan's mesh says (T x P x D). Each is made from the job's LayoutPlan and owns what its kind
// needs: the communicator groups, a piece per dimension (layout_piece.h), the gradient exchange
// (GradSync), the step executor (accumulating or scheduled), the evaluation path, and its report
// for the summary. What follows from the pieces is written once here, for every layout: the
// run-wide reductions (a loss's mean, a stop asked by any rank, an evaluation's sums) over the
// groups each layout names, gradient clipping over every stage, slice and shard, and the
// checkpoints' gather under the model's own names and cut on resume.
//
// Per run: parameters() and buffers() are what this rank trains and saves (the optimizer is
// made over them); start() once they hold the values to start from (after a resume); every
// step run_step(), then clip_gradients() and step_optimizer() around the optimizer;
// end_training() after the last. What the layout's pieces cost goes to the run's accounting
// through exchange_stats() (every layout's) and metrics() (each piece's own).
//
// Threading: one thread (the training loop's). Collective methods must be called by every
// training rank in the same order.
#pragma once

#include <ATen/Tensor.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "loom/comm/communicator.h"
#include "loom/comm/group_maker.h"
#include "loom/core/tensor_to_fetch.h"
#include "loom/models/loss.h"
#include "loom/models/model.h"
#include "loom/parallel/grad_sync.h"
#include "loom/parallel/layout_piece.h"
#include "loom/parallel/layout_plan.h"
#include "loom/parallel/layout_report.h"
#include "loom/parallel/step_executor.h"

namespace loom::parallel {

class DataReplicas;  // data_replicas.h

// What start() needs from the loop.
struct StartOptions {
  const models::Loss* loss = nullptr;    // the training loss
  StepObserver* observer = nullptr;      // hears phases, forward passes and losses
  at::ScalarType autocast = at::kFloat;  // forward under autocast to it (kFloat: none)
  // Count each step's targets and those that count (StepOutcome): the training data has loss
  // masks. Off, nothing scans the targets.
  bool count_targets = false;
  int64_t first_step = 0;  // the step the run starts from (after a resume)
  // Where the rank computes (every rank of a job alike: the CPU, or each its GPU): the ranks'
  // scalars of a step (clipping's norm) are summed there, without a read on the host.
  c10::Device device = c10::kCPU;
  // Servers that keep the optimizer state take rank 0's (its resumed state), as flat fields
  // over the parameters; the local optimizer's state is then dropped (release_optimizer_state).
  std::function<std::optional<HeldOptimizerState>()> optimizer_state;
  std::function<void()> release_optimizer_state;
};

// Scales `gradients` (a whole model's) so that their norm is at most `max_norm`: torch's
// clip_grad_norm_, bit for bit, without its read of the norm on the host (it returns it), which
// on a GPU would wait for the step's queue to drain.
void clip_whole_gradients(const std::vector<at::Tensor>& gradients, double max_norm);

// Scales gradients so that their norm over every rank of `comm` is at most `max_norm` (as
// torch's clip_grad_norm_ does for one process): the norm over every rank's `counted` (each
// element counted on one rank only), then every tensor of `scaled` scaled by the same factor
// where it passes `max_norm`. The squares of the norms are summed in double on `device` (every
// rank's alike: the ranks' sum is a collective there), nothing read on the host.
void clip_gradients_across(const std::vector<at::Tensor>& counted,
                           const std::vector<at::Tensor>& scaled, double max_norm,
                           comm::Communicator& comm, c10::Device device = c10::kCPU);

// Every rank's named tensors, on rank 0 (its own first, then rank 1's, ...); the other ranks
// send theirs and get nothing back.
NamedTensors gather_on_rank0(comm::Communicator& comm, const NamedTensors& mine);

class ParallelLayout {
 public:
  explicit ParallelLayout(LayoutPlan plan) : plan_(std::move(plan)) {}
  virtual ~ParallelLayout() = default;
  ParallelLayout(const ParallelLayout&) = delete;
  ParallelLayout& operator=(const ParallelLayout&) = delete;

  const LayoutPlan& plan() const { return plan_; }
  // What this rank trains and saves: the whole model's tensors, or its pipeline stages'.
  const NamedTensors& parameters() const { return parameters_; }
  const NamedTensors& buffers() const { return buffers_; }
  // What this rank's optimizer steps and keeps state for: parameters(), or its shards of them
  // when the optimizer state is sharded (ZeRO).
  const NamedTensors& optimized_parameters() const;
  // Bytes of parameters this rank holds between steps: parameters()' (their shards under
  // ZeRO-3).
  std::int64_t parameter_bytes_between_steps() const;
  // Of a checkpoint's model tensors (whole, under their names), those this rank holds, as it
  // holds them: its stages', its slices under tensor parallelism. Each piece cuts in turn, in
  // the order the dimensions were applied.
  NamedTensors own_model_state(const NamedTensors& saved) const;
  // A checkpoint's optimizer state (whole, "<param>.<field>") as this rank's optimizer keeps it,
  // under optimized_parameters()' names: its stages', its slices, then its ZeRO shards.
  NamedTensors own_optimizer_state(const NamedTensors& saved) const;

  // Makes the gradient exchange and the step executor; parameters() hold the values every rank
  // starts from (rank 0's are sent to the others where replicas exist).
  virtual void start(const StartOptions& options) = 0;

  // One optimizer step's forward and backward work (after start()).
  StepOutcome run_step(const MicroBatchSource& micro_batch) { return executor_->run(micro_batch); }
  int64_t micro_batches() const { return plan_.step.micro_batches; }
  // The optimizer step, once the step's gradients are final: `local_step` runs this rank's
  // optimizer at `lr` (servers that keep the parameters apply the step themselves).
  void step_optimizer(double lr, const std::function<void()>& local_step) {
    grad_sync_->step(lr, local_step);
  }
  // After the last step: every rank then holds the final parameters.
  void end_training() { grad_sync_->end_training(); }
  // What the last step's gradient exchange cost (buckets, bytes, exposed communication).
  const SyncStats& exchange_stats() const { return grad_sync_->last_stats(); }
  // The layout's pieces that report metrics of their own (layout_metrics.h), for the run's
  // accounting at each log line; owned by the layout.
  std::vector<LayoutMetrics*> metrics();
  // The exchange itself, for what tunes it (bucket limits) or fetches state it holds.
  GradSync& grad_sync() { return *grad_sync_; }
  const GradSync& grad_sync() const { return *grad_sync_; }

  // Where the parameter `name` this rank holds lives along each dimension applied, in the order
  // applied (layout_piece.h).
  std::vector<Placement> placements(const std::string& name) const;
  // Scales the gradients so that their norm over the whole model (every stage, slice and
  // shard) is at most `max_norm`, as torch's clip_grad_norm_ does in one process. Written once
  // for every layout, from the parameters' placements: where any is not replicated, the norm is
  // summed over every training rank, each element counted on one rank only (Placement::
  // counted_at: a replicated one by its group's first rank, a tied copy by its owner's stage).
  void clip_gradients(double max_norm);
  // Multiplies every gradient this rank holds for the optimizer (its parameters', or its ZeRO
  // shards of them) by `factor`: the same on every rank, so the whole model's are scaled.
  void scale_gradients(double factor);
  // fp16's loss scaling (train/loss_scaler.h): backward starts from the loss times `scale` from
  // the next step on (after start()).
  void set_loss_scale(double scale) { executor_->set_loss_scale(scale); }
  // scale_gradients(factor) (1 / the loss scale, times any other factor of the step) that also
  // says whether every gradient of every rank that steps with this one is finite: collective
  // (any_rank), and the one read on the host that a step under loss scaling makes.
  bool unscale_gradients(double factor);

  // The run-wide reductions, written once over the groups each layout names (parts_).
  // The mean of `value` over the training ranks (a loss each rank saw on its share).
  double mean_over_trainers(double value);
  // Whether any rank that steps with this one says yes (SIGTERM asked to stop): ranks in
  // lockstep agree, so that they stop at the same step; others (async and SSP parameter-server
  // workers) decide alone.
  bool any_rank(bool mine);
  // Every training rank's value, by rank, where every rank does the same work (no pipeline
  // stages); empty otherwise.
  std::vector<double> by_trainer(double mine);
  // The whole model's total of a quantity each rank counts for its own stages (FLOPs of a
  // forward pass): summed over a pipeline's ranks.
  double sum_over_stages(double mine);

  // Whether this rank takes part in writing checkpoints (it holds a share no other rank that
  // writes holds: every piece says so); gather() is collective over those ranks.
  bool takes_part_in_checkpoints() const;
  // The whole job's checkpoint tensors on the rank that writes them (the job's rank 0), from
  // every rank's share, for a writer that fetches tensors one at a time: where other ranks'
  // shares would all be held at once (a pipeline's stages on rank 0, ZeRO's shards), they come
  // as tensors to fetch instead. nullopt on the other ranks. Each piece gathers in turn, the
  // last applied first.
  std::optional<CheckpointTensors> gather_for_writing(CheckpointTensors mine);
  // The same with every tensor taken in at once (Python's loom.checkpoint hands them back as
  // lists).
  std::optional<CheckpointTensors> gather(CheckpointTensors mine);
  // The generator state this rank resumes from, of those a checkpoint holds: a pipeline rank's
  // own (the same for that stage in every replica), else the one the checkpoint holds.
  at::Tensor own_rng(const CheckpointTensors& saved) const;

  // Evaluation, forward only without gradients: `batches` batches of this rank's part of a
  // test set, read with `batch(b)`; each output the model's last layer makes goes to `output`
  // with its targets, on the rank that makes it. Every training rank calls it.
  using OutputSink = std::function<void(const at::Tensor& output, const at::Tensor& targets)>;
  virtual void forward_only(int64_t batches, const MicroBatchSource& batch,
                            const OutputSink& output) = 0;
  // Sums an evaluation tallied (on the ranks that saw outputs: a pipeline's last stage) into the
  // job's, on every rank: each piece combines over its group, in the order applied.
  at::Tensor combine_eval_sums(at::Tensor sums);

  // How the run is laid out, for the checkpoint's manifest: {"ranks", "data_parallel", ...}.
  virtual std::string manifest_json() const;
  // The layout's plan in words where there is one (a pipeline's, as `loom pipeline plan` prints
  // it, on rank 0); "" otherwise.
  const std::string& plan_text() const { return plan_text_; }
  // What a rank of this layout waits for besides its data, for the stall watchdog.
  std::string describe_waits() const;
  // Its part of the summary, with every piece's of metrics() (collective where by_trainer()
  // is).
  virtual LayoutReport report();

 protected:
  // What the seam's generic parts (reductions, clipping, what the optimizer steps, the cut of a
  // checkpoint's optimizer state) need from a layout's pieces, set by each layout as it makes
  // them.
  struct LayoutParts {
    comm::Communicator* trainers = nullptr;  // every training rank; null for one process
    comm::Communicator* stages = nullptr;    // this rank's pipeline; null without stages
    // The data dimension's piece, owned by the layout (what the optimizer steps, ZeRO's shards).
    const DataReplicas* data = nullptr;
    // Every piece, in the order its dimension was applied (pipeline, tensor, data): where each
    // parameter lives (its placements), and what the checkpoints' gather and cut go through
    // (layout_piece.h).
    std::vector<LayoutPiece*> applied;
  };

  // What the pieces make of the loss (the one that trains the model for `loss`) and of an
  // evaluation's output (made whole where a piece splits it), in the order applied.
  const models::Loss& training_loss(const models::Loss& loss) const;
  // The gradients the optimizer steps from on this rank: its ZeRO gradient shards, or its
  // parameters' gradients.
  std::vector<at::Tensor> held_gradients() const;
  at::Tensor whole_output(at::Tensor output);

  LayoutParts parts_;
  LayoutPlan plan_;
  c10::Device device_ = c10::kCPU;  // StartOptions::device, kept by start()
  std::string plan_text_;           // see plan_text()
  NamedTensors parameters_, buffers_;
  std::unique_ptr<GradSync> grad_sync_;
  std::unique_ptr<StepExecutor> executor_;
};

}  // namespace loom::parallel
