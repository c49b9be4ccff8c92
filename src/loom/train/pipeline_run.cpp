#include "loom/train/pipeline_run.h"

#include <ATen/ATen.h>

#include "loom/parallel/pipeline/pipeline_layout.h"
#include "loom/train/pipeline_plan.h"

namespace loom::train {

AgreedPipeline agree_on_pipeline(const Config& config, int64_t step_batch, const Topology& topology,
                                 comm::Communicator& comm) {
  AgreedPipeline agreed;
  // First on every rank: a schedule that cannot run fails everywhere alike.
  agreed.schedule = pipeline_schedule(config.parallel.pipeline);
  std::vector<int> split;
  if (comm.rank() == 0) {
    // The plan prices the step's batch, as `loom pipeline plan` does.
    const PipelinePlan plan = plan_pipeline(config, step_batch, topology);
    agreed.plan_text = describe_plan(plan);
    agreed.better_microbatches = plan.better_microbatches;
    agreed.better_bubble = plan.better_bubble;
    split = plan.partition.split_counts();
    agreed.recompute = plan.recompute_chosen;
  }
  agreed.split = parallel::pipeline::shared_split(&comm, split, agreed.schedule.stages);
  at::Tensor recompute = at::full({1}, agreed.recompute ? 1 : 0, at::kLong);
  comm.broadcast(recompute, 0)->wait(comm.options().timeout);
  agreed.recompute = recompute.item<int64_t>() != 0;
  return agreed;
}

}  // namespace loom::train
