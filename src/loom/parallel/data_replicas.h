// The data dimension applied to what a rank holds (the whole model, or its pipeline stages), as
// torchtitan's apply_fsdp/apply_ddp are: replicated over the mesh's "data" group, with ZeRO's
// shards where the plan asks for them (zero_partition.h). Made the same way by both layouts and
// by Python's loom.parallel.DataParallel. It owns what that dimension adds to a step and a
// checkpoint: the partition (the held parameters' memory moves into its flat buckets), the
// gradient exchange over the group (DataParallel; a LocalGradSync without replicas), what the
// optimizer steps (the shards under ZeRO), and the optimizer shards gathered back under the
// parameters' names for a checkpoint and cut again on resume. Under ZeRO-3 the parameters
// themselves are sharded, one bucket a block, and the model runs through a ShardedModel that
// gathers each block's when it runs.
//
// Threading: the training loop's. Collective methods are called by every replica in order.
#pragma once

#include <memory>
#include <set>
#include <string>

#include "loom/comm/communicator.h"
#include "loom/parallel/data_parallel.h"
#include "loom/parallel/layout_piece.h"
#include "loom/parallel/layout_plan.h"
#include "loom/parallel/parallel_layout.h"
#include "loom/parallel/sharded_model.h"
#include "loom/parallel/zero_partition.h"

namespace loom::parallel {

// All-reduce data parallelism over `group`, or none (LocalGradSync) without replicas; `group`
// must outlive the exchange.
std::unique_ptr<GradSync> replica_exchange(NamedTensors parameters, NamedTensors buffers,
                                           comm::Communicator* group,
                                           const DataParallelOptions& options);

// The replicas' group where a dimension inside data (tensor, pipeline) parts the model: the ranks
// of `plan`'s mesh that hold the same part, made by `make_group` under their group's name after
// `prefix` (a script's groups tell theirs apart so); null for one replica.
std::unique_ptr<comm::Communicator> make_replica_group(const LayoutPlan& plan,
                                                       const comm::MakeGroup& make_group,
                                                       const std::string& prefix = "");

class DataReplicas : public LayoutPiece {
 public:
  // `group` holds the replicas (null, or one rank: none) and must outlive the piece. Under ZeRO
  // (plan.zero_stage, with replicas) `parameters` are partitioned and `options.zero` is set to
  // the partition; each parameter named in `alone` gets a bucket of its own (a tied parameter's
  // copies on several pipeline stages, whose shards are then summed alike). Under ZeRO-3
  // `model`'s blocks are the buckets and it runs as a ShardedModel (running()), keeping what
  // plan.zero3_keep says after forward; `model` (null where ZeRO-3 does not apply) must
  // outlive the piece.
  DataReplicas(const DataDim& plan, comm::Communicator* group, const NamedTensors& parameters,
               DataParallelOptions& options, models::Model* model = nullptr,
               const std::set<std::string>& alone = {});

  bool replicated() const { return group_ && group_->world() > 1; }
  comm::Communicator* group() const { return group_; }
  // The ZeRO partition; null where the optimizer state is not sharded.
  ZeroPartition* partition() const { return zero_.get(); }
  // ZeRO-3's model, which gathers each block's shards as it runs; null otherwise.
  ShardedModel* sharded() const { return sharded_.get(); }
  // The model as this rank runs it: `model`, or under ZeRO-3 the model over its shards.
  models::Model& running(models::Model& model) const { return sharded_ ? *sharded_ : model; }
  // Once every rank holds the values it starts from (the exchange gave it rank 0's): under
  // ZeRO-3 each keeps only its shards of them from now on, and the gathers' phases go to `sink`.
  void keep_own_shards(PhaseSink* sink);
  // After the last step of a run that goes on without this dimension (Python's close()): the
  // ZeRO-3 model and the hooks it put on the parameters' gradients go; running() is the model.
  void stop_running_sharded() { sharded_.reset(); }

  // What the optimizer steps of `held`: them, or this rank's shards of them.
  const NamedTensors& optimized(const NamedTensors& held) const {
    return zero_ ? zero_->shards() : held;
  }
  // A checkpoint's optimizer state (under the parameters' names) as this rank keeps it: its
  // shards' under ZeRO.
  NamedTensors own_optimizer_state(NamedTensors saved) const override {
    return zero_ ? zero_->shard_state(saved) : saved;
  }
  // Every parameter is replicated, its gradient and optimizer state ZeRO's shards where the
  // partition is.
  Placement placement(const std::string& /*name*/) const override {
    return {zero_ ? Placement::Kind::kZeroShard : Placement::Kind::kReplicate, {}};
  }
  int coordinate() const override { return group_ ? group_->rank() : 0; }
  // The replicas add their shares of the test set's sums.
  at::Tensor combine_eval_sums(at::Tensor sums) override;
  // Under ZeRO every replica holds its own shards; otherwise the first replica holds what the
  // others do.
  bool takes_part_in_checkpoints() const override {
    return zero_ || !group_ || group_->rank() == 0;
  }
  // Under ZeRO every replica's shards stream to the first replica (streamed_shards.h): the
  // optimizer state's, and ZeRO-3's parameters', as tensors to fetch under the parameters'
  // names; `mine` as it is otherwise.
  std::optional<CheckpointTensors> gather(CheckpointTensors mine) override;
  // The exchange of the held parameters' gradients over the replicas (after the partition).
  std::unique_ptr<GradSync> make_sync(NamedTensors parameters, NamedTensors buffers,
                                      const DataParallelOptions& options) const {
    return replica_exchange(std::move(parameters), std::move(buffers), group_, options);
  }
  // Under ZeRO every replica's optimizer shards go to the group's rank 0, which names them as
  // the parameters in `mine.optimizer`, all at once (Python's loom.checkpoint hands them back
  // so); returns whether this rank holds them (it always does without ZeRO). Collective over
  // the replicas under ZeRO.
  bool gather_optimizer_state(CheckpointTensors& mine) const;
  // Bytes of `held` (the parameters) this rank keeps between steps: all of them, or under
  // ZeRO-3 its shards of those that train.
  std::int64_t parameter_bytes_between_steps(const NamedTensors& held) const;

 private:
  comm::Communicator* group_;
  std::unique_ptr<ZeroPartition> zero_;
  std::unique_ptr<ShardedModel> sharded_;  // over zero_: declared after it, so destroyed first
};

}  // namespace loom::parallel
