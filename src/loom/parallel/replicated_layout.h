// Layouts where every training rank holds the whole model: one process (no exchange), all-reduce
// data parallelism, and parameter servers (the workers' buckets pushed to the servers, or
// servers that keep the parameters: async, SSP, the optimizer on the servers). A step is
// train.grad_accum micro-batches accumulated on each rank (AccumulatingExecutor); evaluation
// splits the test set over the ranks, each with rank 0's model, and adds their sums. With
// plan.data.zero_stage (ZeRO-1/2/3, all-reduce data parallelism) the parameters are partitioned
// (data_replicas.h): each rank's optimizer keeps and steps its shards, and checkpoints turn the
// shards' state back into state under the parameters' names. Under ZeRO-3 the model runs as a
// ShardedModel (sharded_model.h). A checkpoint under ZeRO streams every rank's shards to rank 0
// a bucket at a time (streamed_shards.h). With plan.tensor each rank holds its tensor group's
// slices of the model (tensor_ranks.h) and the replicas are the ranks holding the same slices.
#pragma once

#include <memory>

#include "loom/comm/communicator.h"
#include "loom/parallel/data_parallel.h"
#include "loom/parallel/data_replicas.h"
#include "loom/parallel/job_groups.h"
#include "loom/parallel/parallel_layout.h"
#include "loom/parallel/ps/ps_bucket_exchange.h"
#include "loom/parallel/sharded_model.h"
#include "loom/parallel/tensor_ranks.h"

namespace loom::parallel {

struct ReplicatedLayoutOptions {
  DataParallelOptions data_parallel;  // buckets, unused parameters, buffers, compression
  // The job's groups: the training ranks (null for one process; they must outlive the layout),
  // the maker of the tensor groups and the data groups across them (plan.tensor), and the
  // parameter servers' part of the job.
  JobGroups groups;
  // How many tensors per parameter the servers' optimizer keeps (when it runs there).
  int server_state_fields = 0;
};

// The gradient exchange of one replica of the whole model, as the plan asks: none for one
// process, all-reduce among `trainers`, the workers' buckets through parameter servers, or
// servers that keep the parameters (which take rank 0's optimizer state from `start` when the
// optimizer runs there). Collective over the training ranks (rank 0's parameters and buffers
// go to the others).
std::unique_ptr<GradSync> make_replica_sync(const LayoutPlan& plan, NamedTensors parameters,
                                            NamedTensors buffers, comm::Communicator* trainers,
                                            const ReplicatedLayoutOptions& options,
                                            const StartOptions& start);

class ReplicatedLayout : public ParallelLayout {
 public:
  // `model` must outlive the layout. Under ZeRO the parameters' memory moves into the
  // partition's flat buckets here.
  ReplicatedLayout(LayoutPlan plan, models::Model& model, ReplicatedLayoutOptions options);
  ~ReplicatedLayout() override;

  void start(const StartOptions& options) override;
  void forward_only(int64_t batches, const MicroBatchSource& batch,
                    const OutputSink& output) override;

 private:
  // The replicas' group: the training ranks, or under tensor parallelism the ranks that hold the
  // same slices.
  comm::Communicator* replica_group() const { return tensor_ ? replica_group_.get() : trainers_; }
  // The model as this rank runs it: the model, or its ZeRO-3 shards gathered block by block.
  models::Model& running_model() { return data_->running(model_); }

  models::Model& model_;
  comm::Communicator* trainers_;
  ReplicatedLayoutOptions options_;
  at::ScalarType autocast_ = at::kFloat;  // forward under autocast to it (start())
  // The groups first, so that they go last: the pieces below hold work over them.
  std::unique_ptr<TensorRanks> tensor_;                // tensor parallelism
  std::unique_ptr<comm::Communicator> replica_group_;  // its replicas, where there are several
  std::unique_ptr<DataReplicas> data_;                 // the model over the replicas (and ZeRO)
};

}  // namespace loom::parallel
