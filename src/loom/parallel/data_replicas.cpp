#include "loom/parallel/data_replicas.h"

#include "loom/core/error.h"
#include "loom/parallel/local_grad_sync.h"

namespace loom::parallel {

namespace {

// ZeRO-3's buckets: each block's parameters, in forward order.
std::vector<std::vector<std::string>> block_units(models::Model& model) {
  std::vector<std::vector<std::string>> units;
  for (const models::Block& block : model.blocks()) {
    units.emplace_back();
    for (const auto& [name, p] : block.parameters) units.back().push_back(name);
  }
  return units;
}

}  // namespace

std::unique_ptr<comm::Communicator> make_replica_group(const LayoutPlan& plan,
                                                       const MakeGroup& make_group,
                                                       const std::string& prefix) {
  if (plan.data.replicas <= 1) return nullptr;
  if (!make_group) throw Error("data parallel: replicas of a part of the model need groups");
  return make_group(plan.mesh.group(plan.rank, kDataDim),
                    prefix + plan.mesh.group_name(plan.rank, kDataDim));
}

DataReplicas::DataReplicas(const DataDim& plan, comm::Communicator* group,
                           const NamedTensors& parameters, DataParallelOptions& options,
                           models::Model* model, const std::set<std::string>& alone)
    : group_(group) {
  if (plan.zero_stage == 0 || !replicated()) return;
  if (plan.zero_stage == 3 && !model) throw Error("ZeRO-3: no model to shard block by block");
  zero_ = std::make_unique<ZeroPartition>(
      parameters, group_->rank(), group_->world(), options.buckets, plan.zero_stage, alone,
      plan.zero_stage == 3 ? block_units(*model) : std::vector<std::vector<std::string>>{});
  options.zero = zero_.get();
  if (zero_->shards_parameters()) {
    sharded_ = std::make_unique<ShardedModel>(*model, *zero_, *group_, plan.zero3_keep);
  }
}

void DataReplicas::keep_own_shards(PhaseSink* sink) {
  if (!sharded_) return;
  zero_->shard_parameters();
  sharded_->set_phase_sink(sink);
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

}  // namespace loom::parallel
