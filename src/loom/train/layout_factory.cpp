#include "loom/train/layout_factory.h"

#include <algorithm>

#include "loom/models/recompute.h"
#include "loom/parallel/pipeline/pipeline_layout.h"
#include "loom/parallel/replicated_layout.h"
#include "loom/train/optimizer_on_servers.h"
#include "loom/train/pipeline_planning.h"

namespace loom::train {

RunPlan plan_run(const Config& config, int world, int rank, const TrainOptions& options) {
  RunPlan plan;
  plan.layout = parallel::plan_layout(config, world, rank);
  plan.recompute_every = models::recompute_every(config.train);
  if (!plan.layout.pipeline) return plan;
  plan.pipeline = parallel::pipeline::agree_on_pipeline(
      config, plan.layout.step.replica_batch, options.topology,
      model_on_first_batch_of(config, options.topology, options.local_rank),
      *options.groups.trainers);
  // The pipeline's plan may shard over the pipelines, or recompute, to fit the memory cap.
  plan.layout.data.zero_stage = std::max(plan.layout.data.zero_stage, plan.pipeline->zero);
  if (plan.pipeline->recompute_every > 0) plan.recompute_every = plan.pipeline->recompute_every;
  return plan;
}

std::unique_ptr<parallel::ParallelLayout> LayoutFactory::make(models::Model& model) const {
  const parallel::JobGroups& groups = options_.groups;
  if (const auto& pipeline = plan_.pipeline) {
    parallel::pipeline::PipelineLayoutOptions options;
    options.schedule = pipeline->schedule;
    options.split = pipeline->split;
    options.data_parallel = parallel::data_parallel_options(config_.parallel);
    options.plan_text = pipeline->plan_text;
    options.better_microbatches = pipeline->better_microbatches;
    options.better_bubble = pipeline->better_bubble;
    options.eval_batch = config_.data.eval_batch_size;
    return std::make_unique<parallel::pipeline::PipelineLayout>(
        plan_.layout, model, *groups.trainers, groups.make_group, std::move(options));
  }
  parallel::ReplicatedLayoutOptions options;
  options.data_parallel = parallel::data_parallel_options(config_.parallel);
  options.groups = groups;
  if (plan_.layout.servers) {
    options.groups.ps.part_bytes = std::max<std::int64_t>(
        1, static_cast<std::int64_t>(config_.parallel.ps.part_mb * (1 << 20)));
    options.server_state_fields =
        static_cast<int>(parallel::ps::held_state_fields(config_.optimizer).size());
  }
  return std::make_unique<parallel::ReplicatedLayout>(plan_.layout, model, std::move(options));
}

}  // namespace loom::train
