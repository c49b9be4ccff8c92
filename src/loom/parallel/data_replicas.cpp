#include "loom/parallel/data_replicas.h"

#include "loom/core/error.h"
#include "loom/parallel/local_grad_sync.h"
#include "loom/parallel/streamed_shards.h"

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
                                                       const comm::MakeGroup& make_group,
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

at::Tensor DataReplicas::combine_eval_sums(at::Tensor sums) {
  if (replicated()) group_->allreduce(sums, comm::ReduceOp::kSum)->wait(group_->options().timeout);
  return sums;
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

std::optional<CheckpointTensors> DataReplicas::gather(CheckpointTensors mine) {
  if (!zero_) return mine;
  // Every rank's shards stream to the first replica (the optimizer state's, and ZeRO-3's
  // parameters'); the rest of what it holds is the first replica's own, as every replica holds
  // the same.
  std::optional<StreamedShards> streamed = stream_shards(*zero_, mine.optimizer, *group_);
  if (!streamed) return std::nullopt;
  if (zero_->shards_parameters()) {
    std::set<std::string> sharded;
    for (const auto& [name, p] : zero_->parameters()) sharded.insert(name);
    NamedTensors kept;
    for (auto& named : mine.model) {
      if (!sharded.count(named.first)) kept.push_back(std::move(named));
    }
    mine.model = std::move(kept);
  }
  mine.model_to_fetch = std::move(streamed->parameters);
  mine.optimizer = std::move(streamed->scalars);
  mine.optimizer_to_fetch = std::move(streamed->optimizer);
  mine.finish = std::move(streamed->finish);
  return mine;
}

std::int64_t DataReplicas::parameter_bytes_between_steps(const NamedTensors& held) const {
  const bool sharded = zero_ && zero_->shards_parameters();
  std::set<std::string> in_shards;
  if (sharded) {
    for (const auto& [name, p] : zero_->parameters()) in_shards.insert(name);
  }
  std::int64_t bytes = 0;
  for (const auto& [name, t] : held) {
    if (!in_shards.count(name)) bytes += static_cast<std::int64_t>(t.numel() * t.element_size());
  }
  if (sharded) {
    for (std::size_t b = 0; b < zero_->bucket_count(); ++b) {
      const at::Tensor& shard = zero_->parameter_shard(b);
      bytes += static_cast<std::int64_t>(shard.numel() * shard.element_size());
    }
  }
  return bytes;
}

}  // namespace loom::parallel
