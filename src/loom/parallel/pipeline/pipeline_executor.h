// The step executor of one pipeline rank: it runs exactly the schedule's action list for this
// rank. Forward and backward run the rank's stages (chains of the model's blocks); activations
// go to the next stage's rank and input gradients back to the previous one, point to point over
// the Communicator (shared memory inside a host, tcp across hosts). The first stage reads the
// micro-batches; their targets travel with the activations to the last stage, which computes the
// loss (scaled by 1/micro-batches, so the step's gradient is the mean over them, as with
// accumulation). Every rank returns the step's loss and samples, and every rank reports the
// step's mean loss to the observer, so a non-finite loss stops all stages at the same step.
//
// Messages: comm/tensor_message (a header with type and shape, then the bytes), so stages need
// no agreement on shapes beforehand and a short micro-batch (bad samples skipped) passes
// through; a micro-batch with no samples left passes as empty tensors and has no forward or
// backward. The headers cross host memory; the bytes stay on the stages' device (on GPUs over
// the communicator's device backend: NCCL from GPU to GPU, one channel per direction and peer,
// or through the host where ranks share a GPU), so no host waits for its GPU to send or receive.
// The labels' header carries how many of them count in the loss, counted by the first stage's
// feeder on the host. Sends are asynchronous and complete by the end of the step; receives block at
// their place in the list. Send/recv pair up in call order per peer, which the validated schedule
// guarantees; still, every message's header carries what it is (sending stage, micro-batch,
// activations, labels or gradient, and the step), and a receive that gets anything else fails
// naming both, rather than computing on a tensor of the right shape from the wrong place.
//
// `comm` connects this pipeline's ranks (pipeline rank = its rank). `sync` sees every backward
// under no_sync except each stage's last one (its final B or W), which runs synchronised after
// one prepare(): data-parallel replicas of the pipeline exchange a stage's summed gradients as
// that backward produces them, overlapped with the rest of the schedule; finish() at the end of
// the step waits for them.
//
// Threading: one thread (the trainer's); the communicator moves the bytes in the background.
#pragma once

#include <functional>
#include <map>
#include <utility>
#include <vector>

#include "loom/comm/communicator.h"
#include "loom/comm/tensor_message.h"
#include "loom/models/loss.h"
#include "loom/models/model.h"
#include "loom/parallel/grad_sync.h"
#include "loom/parallel/pipeline/schedule.h"
#include "loom/parallel/step_executor.h"

namespace loom::parallel::pipeline {

// The blocks of every stage: `split[s]` consecutive blocks for stage s, in order.
std::vector<std::vector<models::Block>> stage_blocks(const std::vector<models::Block>& blocks,
                                                     const std::vector<int>& split);

struct PipelineExecutorOptions {
  at::ScalarType autocast = at::kFloat;  // forward under autocast to it (kFloat: none)
  bool count_targets = false;            // StartOptions::count_targets
  // Where this rank's stages compute, and what other ranks send arrives.
  c10::Device device = c10::kCPU;
};

class PipelineExecutor : public StepExecutor {
 public:
  // What a message between stages carries; part of its label.
  enum class Payload : int64_t { kActivations = 1, kLabels = 2, kGradient = 3 };

  // `stage_blocks[s]` are the blocks of stage s; only this rank's stages are used. `sync`
  // clears (and, with replicas, will exchange) the gradients of this rank's parameters. All
  // references must outlive the executor. Throws Error when the schedule is not for this world.
  PipelineExecutor(Schedule schedule, std::vector<std::vector<models::Block>> stage_blocks,
                   const models::Loss& loss, GradSync& sync, comm::Communicator& comm,
                   StepObserver& observer, PipelineExecutorOptions options = {});

  int64_t micro_batches() const override { return schedule_.microbatches; }
  StepOutcome run(const MicroBatchSource& micro_batch) override;

  // Forward only, without gradients, `batches` batches one after another through every stage
  // (evaluation). The first stage reads `batch(b)`; on the last stage's rank `output` gets each
  // batch's last-stage output and targets. Every rank must call it with the same count.
  using OutputSink = std::function<void(const at::Tensor& output, const at::Tensor& targets)>;
  void forward_only(int64_t batches, const MicroBatchSource& batch, const OutputSink& output);

  int rank() const { return rank_; }
  const Schedule& schedule() const { return schedule_; }

 private:
  // What one (stage, micro-batch) keeps between its actions.
  struct Slot {
    at::Tensor targets;  // from the micro-batch, passed on with the activations
    // The targets that count in the loss, counted on the host (the feeder's count, passed on in
    // the labels' header): -1 where not counted.
    int64_t counted_targets = -1;
    at::Tensor input;        // received activations (a leaf that wants its gradient)
    at::Tensor output;       // the stage's output, or the scaled loss on the last stage
    at::Tensor output_grad;  // received from the next stage
    at::Tensor input_grad;   // computed by B or I, sent to the previous stage
  };

  void forward(const Action& a, const MicroBatchSource& micro_batch, StepOutcome& outcome);
  // The stage's blocks on `input` (under autocast when asked); a failure names the input's
  // shape and the stage it came from.
  at::Tensor run_stage(const Action& a, const at::Tensor& input);
  void backward(const Action& a, bool input_only);
  void backward_weights(const Action& a);
  // The gradient backward starts from: none for the loss, the received one otherwise.
  std::vector<at::Tensor> output_grad(const Action& a);
  // The label of what `stage` sends for `microbatch` in this step.
  comm::MessageLabel label(int stage, int microbatch, Payload payload) const;
  // `note`: what the labels' header says of them (Slot::counted_targets).
  void send(const at::Tensor& tensor, const Action& a, int peer_stage, Payload payload,
            int64_t note = -1);
  // Receives what `peer_stage` sends for `a`'s micro-batch, failing when something else comes,
  // on this rank's device; `note` (optional) takes its header's note.
  at::Tensor receive(const Action& a, int peer_stage, Payload payload, int64_t* note = nullptr);
  // The labels of `a`'s micro-batch from the previous stage, with their count (count_targets).
  void receive_targets(const Action& a, Slot& s);
  // The ranks this rank exchanges messages with: those of the stages next to its own.
  std::vector<int> neighbour_ranks() const;
  // Where forward leaves a stage's output when the next stage runs on this rank too.
  void hand_over(const Action& a, const at::Tensor& output);
  bool is_empty(const Slot& s) const { return s.targets.defined() && s.targets.size(0) == 0; }
  // The step's loss and samples, known to the last stage, for every rank.
  void share_outcome(StepOutcome& outcome);
  Slot& slot(const Action& a) { return slots_[{a.stage, a.microbatch}]; }
  int rank_of(int stage) const { return schedule_.stage_rank[static_cast<size_t>(stage)]; }
  bool is_last(int stage) const { return stage == schedule_.stages - 1; }
  [[noreturn]] void fail(const Action& a, const std::string& what) const;

  Schedule schedule_;
  std::vector<std::vector<models::Block>> stage_blocks_;
  std::vector<std::vector<at::Tensor>> stage_weights_;  // per stage: parameters that train
  std::vector<bool> final_gradient_;  // per action of this rank: its stage's last weight gradients
  const models::Loss& loss_;
  GradSync& sync_;
  comm::Communicator& comm_;
  StepObserver& observer_;
  PipelineExecutorOptions options_;
  int rank_;
  int64_t step_ = -1;  // counts run() and forward_only() calls: the same on every rank
  std::map<std::pair<int, int>, Slot> slots_;
  comm::PendingSends sends_;  // completed by the end of the step
};

}  // namespace loom::parallel::pipeline
