#include "loom/parallel/data_replicas.h"

#include "loom/parallel/local_grad_sync.h"

namespace loom::parallel {

DataReplicas::DataReplicas(const DataDim& plan, comm::Communicator* group,
                           const NamedTensors& parameters, DataParallelOptions& options,
                           const std::set<std::string>& alone,
                           const std::vector<std::vector<std::string>>& units)
    : group_(group) {
  if (plan.zero_stage == 0 || !replicated()) return;
  zero_ = std::make_unique<ZeroPartition>(
      parameters, group_->rank(), group_->world(), options.buckets, plan.zero_stage, alone,
      plan.zero_stage == 3 ? units : std::vector<std::vector<std::string>>{});
  options.zero = zero_.get();
}

std::unique_ptr<GradSync> replica_exchange(NamedTensors parameters, NamedTensors buffers,
                                           comm::Communicator* group,
                                           const DataParallelOptions& options) {
  if (!group || group->world() == 1) return std::make_unique<LocalGradSync>(std::move(parameters));
  return std::make_unique<DataParallel>(std::move(parameters), std::move(buffers), *group, options);
}

bool DataReplicas::gather_optimizer_state(CheckpointTensors& mine) const {
  if (!zero_) return true;
  NamedTensors shards = gather_on_rank0(*group_, mine.optimizer);
  if (group_->rank() != 0) return false;
  mine.optimizer = zero_->named_state(shards);
  return true;
}

std::int64_t DataReplicas::parameter_bytes_between_steps(const NamedTensors& held) const {
  std::int64_t bytes = 0;
  for (const auto& [name, t] : held) {
    if (!zero_ || !zero_->shards_parameters() || !t.requires_grad()) {
      bytes += static_cast<std::int64_t>(t.numel() * t.element_size());
    }
  }
  if (zero_ && zero_->shards_parameters()) {
    for (const auto& [name, shard] : zero_->shards()) {
      bytes += static_cast<std::int64_t>(shard.numel() * shard.element_size());
    }
  }
  return bytes;
}

void DataReplicas::sum(at::Tensor& sums) const {
  if (!replicated()) return;
  group_->allreduce(sums, comm::ReduceOp::kSum)->wait(group_->options().timeout);
}

}  // namespace loom::parallel
