#include "loom/parallel/pipeline/agreed_pipeline.h"

#include <ATen/ATen.h>

#include "loom/parallel/pipeline/pipeline_layout.h"

namespace loom::parallel::pipeline {

AgreedPipeline agree_on_pipeline(const Config& config, int64_t step_batch, const Topology& topology,
                                 const MakeModelOnBatch& model_on_batch, comm::Communicator& comm) {
  AgreedPipeline agreed;
  // First on every rank: a schedule that cannot run fails everywhere alike.
  agreed.schedule = pipeline_schedule(config.parallel.pipeline);
  std::vector<int> split;
  if (comm.rank() == 0) {
    // The plan prices the step's batch, as `loom pipeline plan` does.
    const int replicas =
        comm.world() / static_cast<int>(config.parallel.pipeline.stages * config.parallel.tensor);
    const PipelinePlan plan = plan_pipeline(config, step_batch, topology, model_on_batch, replicas);
    agreed.plan_text = describe_plan(plan);
    agreed.better_microbatches = plan.better_microbatches;
    agreed.better_bubble = plan.better_bubble;
    split = plan.partition.split_counts();
    agreed.recompute_every = plan.recompute_every_chosen;
    agreed.zero = plan.zero_chosen;
  }
  agreed.split = shared_split(&comm, split, agreed.schedule.stages);
  at::Tensor choices = at::tensor({agreed.recompute_every, int64_t{agreed.zero}}, at::kLong);
  comm.broadcast(choices, 0)->wait(comm.options().timeout);
  agreed.recompute_every = choices[0].item<int64_t>();
  agreed.zero = static_cast<int>(choices[1].item<int64_t>());
  return agreed;
}

}  // namespace loom::parallel::pipeline
