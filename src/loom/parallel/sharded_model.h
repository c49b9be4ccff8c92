// A model whose parameters live as ZeRO-3 shards (zero_partition.h, one bucket a block, and one
// for its frozen parameters): its forward runs the model's chain of blocks and gathers each
// block's parameters (and the tied ones it reads) just before the block runs, the next block's
// gather started before this one computes so that it overlaps that compute, and frees them once
// the block has run. In backward a hook on each block's output gathers them again just before the
// block's backward (and starts the previous block's). Parameters that train are freed as soon as
// every gradient of theirs has landed (its reduce-scatter is DataParallel's); frozen ones (a LoRA
// fine-tune's base), which get no gradient, once backward has passed their block (the gradient of
// the block's input is complete). So a rank holds 1/ranks of the parameters between uses, and
// about two blocks' whole ones at a time, as DeepSpeed's ZeRO-3 and FSDP do. Under bf16
// autocast, though, the bf16 copies of the weights that autocast makes (and autograd keeps for
// backward) live from a block's forward to its backward: about half the fp32 parameters' bytes
// that no gather frees (FSDP gathers in bf16 to avoid them; Loom does not yet).
//
// The model must be its chain of blocks (models::check_blocks, on the first input): a model
// whose forward is something else (a TorchScript module's children need not be its forward) is a
// configuration error rather than another computation. The blocks are the model's own,
// activation recompute included: a recomputed block's
// recompute runs inside its backward, with its parameters gathered. A tied parameter (the GPT
// head's embedding matrix) is gathered for each block that reads it; its bucket stays whole
// from the head's backward until its owner's, where its gradient is complete.
//
// `keep` trades memory for a second gather: kNone frees every block after its forward, kLast
// keeps the last block's (its backward comes next), kAll keeps every block's until backward
// (only the time between steps is then sharded).
//
// Threading: the training loop's, backward included (CPU autograd runs on the caller's
// thread). The gathers are collectives over the replicas' group, in block order in forward and
// in reverse in backward: the same on every rank, as every rank runs the same model.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "loom/comm/communicator.h"
#include "loom/core/step_phase.h"
#include "loom/models/model.h"
#include "loom/parallel/layout_plan.h"
#include "loom/parallel/zero_partition.h"

namespace loom::parallel {

class ShardedModel : public models::Model {
 public:
  // `inner`'s trainable parameters must be `partition`'s (stage 3, made over `inner`'s blocks
  // as units), still whole. `inner`, `partition` and `group` must outlive this.
  ShardedModel(models::Model& inner, ZeroPartition& partition, comm::Communicator& group,
               KeepAfterForward keep);
  ~ShardedModel() override;
  ShardedModel(const ShardedModel&) = delete;
  ShardedModel& operator=(const ShardedModel&) = delete;

  at::Tensor forward(const at::Tensor& input) override;
  models::NamedTensors named_parameters() override { return inner_.named_parameters(); }
  models::NamedTensors named_buffers() override { return inner_.named_buffers(); }
  void train(bool on) override {
    training_ = on;
    inner_.train(on);
  }
  bool is_convolutional() const override { return inner_.is_convolutional(); }
  std::string name() const override { return inner_.name(); }
  // The inner model's blocks, each gathering its parameters as forward() does.
  std::vector<models::Block> blocks() override;
  double training_flops_per_sample() const override { return inner_.training_flops_per_sample(); }
  bool forward_is_collective() const override { return true; }
  // Every block's parameters whole until let_go(): an evaluation's forwards then need no
  // collectives, so ranks with different numbers of batches (or none) do not wait on each other.
  void hold_whole();
  void let_go();

  // The buckets (of the partition) block `b` reads, its own and its tied parameters'.
  const std::vector<std::size_t>& buckets_of_block(std::size_t b) const { return needs_[b]; }

  // What forward() does around block `b`'s own forward, for a caller that runs the blocks
  // itself (a Python module's hooks): before_block() gathers its parameters (and starts the
  // next block's); after_block() hooks its backward onto `output` and frees what it may.
  void before_block(std::size_t b);
  void after_block(std::size_t b, const at::Tensor& output);
  // The same for a block that returns several tensors (a module's output structure): backward
  // gathers the block when it reaches the first of them.
  void after_block(std::size_t b, const std::vector<at::Tensor>& outputs);

  // Where a gather the block waits for is charged: comm_exposed, then back to forward or
  // backward (null: not reported).
  void set_phase_sink(PhaseSink* sink) { phases_ = sink; }

 private:
  class LandedHook;
  at::Tensor run_block(std::size_t b, const at::Tensor& input);
  void check_chain(const at::Tensor& probe);
  void gather(std::size_t b);   // starts block b's gathers (no-op for those whole or underway)
  void release(std::size_t b);  // frees block b's, but those block b + 1 reads
  // And waits for them, in training charged to comm_exposed and then to `running` again
  // (evaluation's forward, without gradients, is not a step's).
  void wait_whole(std::size_t b, Phase running);
  void backward_reaches(std::size_t b);
  // Frees block `done`'s frozen buckets once backward has passed it (those blocks done - 1 and
  // done - 2 read stay: they are wanted next).
  void release_frozen_after_backward(std::size_t done);
  void gradient_landed(std::size_t bucket);
  void end_backward();

  models::Model& inner_;
  ZeroPartition& partition_;
  comm::Communicator& group_;
  KeepAfterForward keep_;
  std::vector<models::Block> blocks_;
  std::vector<std::vector<std::size_t>> needs_;  // block -> buckets
  std::vector<int> landed_;                      // bucket -> gradients landed this backward
  bool backward_running_ = false;                // end_backward() is queued
  PhaseSink* phases_ = nullptr;
  bool training_ = true;
  bool chain_checked_ = false;
  bool held_ = false;                                // hold_whole()
  std::vector<std::shared_ptr<void>> accumulators_;  // autograd nodes holding our hooks
  std::vector<std::uintptr_t> hook_keys_;
};

}  // namespace loom::parallel
