#include "loom/parallel/replicated_layout.h"

#include <torch/utils.h>

#include "loom/core/autocast_scope.h"
#include "loom/parallel/accumulating_executor.h"
#include "loom/parallel/ps/remote_parameters.h"

namespace loom::parallel {

ReplicatedLayout::ReplicatedLayout(LayoutPlan plan, models::Model& model,
                                   ReplicatedLayoutOptions options)
    : ParallelLayout(std::move(plan)),
      model_(model),
      trainers_(options.groups.trainers),
      options_(std::move(options)) {
  if (plan_.tensor) {
    // Each rank joins its tensor group first, then the replicas of its slices (disjoint groups in
    // each round, so no rank waits on one busy joining another).
    tensor_ = std::make_unique<TensorRanks>(plan_, model, options_.groups.make_group);
    replica_group_ = make_replica_group(plan_, options_.groups.make_group);
  }
  parameters_ = model.named_parameters();
  buffers_ = model.named_buffers();
  data_ = std::make_unique<DataReplicas>(plan_.data, replica_group(), parameters_,
                                         options_.data_parallel, &model);
  parts_.trainers = trainers_;
  parts_.data = data_.get();
  if (tensor_) parts_.applied.push_back(tensor_.get());
  parts_.applied.push_back(data_.get());
}

ReplicatedLayout::~ReplicatedLayout() {
  // The exchange and the executor (the base's) use the groups and pieces this layout owns: they
  // go first.
  executor_.reset();
  grad_sync_.reset();
}

std::unique_ptr<GradSync> make_replica_sync(const LayoutPlan& plan, NamedTensors parameters,
                                            NamedTensors buffers, comm::Communicator* trainers,
                                            const ReplicatedLayoutOptions& options,
                                            const StartOptions& start) {
  if (plan.servers_hold_parameters()) {
    // Worker 0's parameters (and a resumed run's optimizer state) go to the servers, which keep
    // them from now on; the local optimizer then holds nothing.
    ps::RemoteParametersOptions remote;
    remote.roles = options.groups.ps.roles;
    remote.job = options.groups.ps.job;
    remote.server_hosts = options.groups.ps.server_hosts;
    remote.part_bytes = options.groups.ps.part_bytes;
    remote.mode = ps_mode_name(plan.servers->mode);
    // Sync with the optimizer on the servers: SSP, s = 0.
    remote.staleness = plan.servers->staleness;
    remote.optimizer_on_server = plan.servers->optimizer_on_server;
    remote.first_step = start.first_step;
    if (plan.servers->optimizer_on_server) {
      remote.state_fields = options.server_state_fields;
      if (plan.rank == 0 && start.optimizer_state) remote.state = start.optimizer_state();
      if (start.release_optimizer_state) start.release_optimizer_state();
    }
    return std::make_unique<ps::RemoteParameters>(std::move(parameters), std::move(buffers),
                                                  *trainers, *options.groups.ps_world,
                                                  std::move(remote));
  }
  if (plan.servers) {
    // The workers' buckets go to the servers, which send back the means.
    return std::make_unique<DataParallel>(
        std::move(parameters), std::move(buffers), *trainers, options.data_parallel,
        std::make_unique<ps::PsBucketExchange>(*options.groups.ps_world, options.groups.ps));
  }
  return replica_exchange(std::move(parameters), std::move(buffers), trainers,
                          options.data_parallel);
}

void ReplicatedLayout::start(const StartOptions& options) {
  device_ = options.device;
  autocast_ = options.autocast;
  grad_sync_ = plan_.servers
                   ? make_replica_sync(plan_, parameters_, buffers_, trainers_, options_, options)
                   : data_->make_sync(parameters_, buffers_, options_.data_parallel);
  // Every rank now holds the values to start from: ZeRO-3 keeps its shards of them only.
  data_->keep_own_shards(options.observer);
  if (tensor_) tensor_->set_phase_sink(options.observer);
  AccumulatingOptions step;
  step.micro_batches = plan_.step.micro_batches;
  step.autocast = options.autocast;
  step.count_targets = options.count_targets;
  executor_ = std::make_unique<AccumulatingExecutor>(running_model(), training_loss(*options.loss),
                                                     *grad_sync_, *options.observer, step);
}

void ReplicatedLayout::forward_only(int64_t batches, const MicroBatchSource& batch,
                                    const OutputSink& output) {
  // Every rank evaluates its part of the test set with rank 0's model.
  grad_sync_->sync_buffers();
  torch::NoGradGuard no_grad;
  // ZeRO-3: every block whole for the evaluation, so that ranks with other numbers of batches
  // need no collective in step with each other.
  ShardedModel* sharded = data_->sharded();
  if (sharded) sharded->hold_whole();
  running_model().train(false);
  for (int64_t b = 0; b < batches; ++b) {
    const MicroBatch input = batch(b);
    if (!input.input.defined()) continue;  // every sample of it was bad
    at::Tensor logits;
    {
      AutocastScope autocast(autocast_);
      logits = running_model().forward(input.input);
    }
    output(whole_output(logits), input.targets);
  }
  running_model().train(true);
  if (sharded) sharded->let_go();
}

}  // namespace loom::parallel
