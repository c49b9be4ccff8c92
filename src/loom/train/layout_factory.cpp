#include "loom/train/layout_factory.h"

#include <algorithm>

#include "loom/models/recompute.h"
#include "loom/parallel/pipeline/pipeline_layout.h"
#include "loom/parallel/replicated_layout.h"
#include "loom/train/server_optimizer.h"

namespace loom::train {

parallel::DataParallelOptions data_parallel_options(const ParallelConfig& config) {
  parallel::DataParallelOptions options;
  options.buckets = parallel::bucket_limits(config.first_bucket_mb, config.bucket_cap_mb);
  options.find_unused_parameters = config.find_unused_parameters;
  options.broadcast_buffers = config.broadcast_buffers;
  if (config.compression == "bf16") options.compression = at::kBFloat16;
  if (config.compression == "fp16") options.compression = at::kHalf;
  return options;
}

LayoutFactory::LayoutFactory(const Config& config, parallel::LayoutPlan plan,
                             const TrainOptions& options)
    : config_(config), plan_(std::move(plan)), options_(options) {
  if (plan_.mode == parallel::LayoutMode::kPipeline) {
    pipeline_ = agree_on_pipeline(config_, plan_.step.replica_batch, options_.topology,
                                  *options_.communicator);
    // The plan may shard over the pipelines to fit the memory cap.
    if (pipeline_->zero > plan_.zero_stage) plan_.zero_stage = pipeline_->zero;
  }
}

int64_t LayoutFactory::recompute_every() const {
  return pipeline_ && pipeline_->recompute_every > 0 ? pipeline_->recompute_every
                                                     : models::recompute_every(config_.train);
}

std::unique_ptr<parallel::ParallelLayout> LayoutFactory::make(models::Model& model) const {
  if (pipeline_) {
    parallel::pipeline::PipelineLayoutOptions options;
    options.schedule = pipeline_->schedule;
    options.split = pipeline_->split;
    options.data_parallel = data_parallel_options(config_.parallel);
    options.plan_text = pipeline_->plan_text;
    options.better_microbatches = pipeline_->better_microbatches;
    options.better_bubble = pipeline_->better_bubble;
    options.eval_batch = config_.data.eval_batch_size;
    return std::make_unique<parallel::pipeline::PipelineLayout>(
        plan_, model, *options_.communicator, options_.make_group, std::move(options));
  }
  parallel::ReplicatedLayoutOptions options;
  options.data_parallel = data_parallel_options(config_.parallel);
  if (plan_.mode == parallel::LayoutMode::kParameterServers) {
    options.ps_world = options_.ps_world;
    options.ps = options_.ps;
    options.ps.part_bytes = std::max<std::int64_t>(
        1, static_cast<std::int64_t>(config_.parallel.ps.part_mb * (1 << 20)));
    options.server_state_fields = static_cast<int>(held_state_fields(config_.optimizer).size());
  }
  return std::make_unique<parallel::ReplicatedLayout>(plan_, model, options_.communicator,
                                                      std::move(options));
}

}  // namespace loom::train
