#include "loom/train/pipeline_run.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <cmath>

#include "loom/comm/tensor_message.h"
#include "loom/core/caching_allocator.h"
#include "loom/core/error.h"
#include "loom/train/data_parallel_run.h"
#include "loom/train/pipeline_plan.h"

namespace loom::train {

namespace pp = parallel::pipeline;

Config config_for_pipeline(Config config, int world) {
  PipelineConfig& pc = config.parallel.pipeline;
  const std::string stages = std::to_string(pc.stages);
  if (world == 1) {
    throw ConfigError("config key 'parallel.pipeline.stages': " + stages +
                      " stages need as many ranks; start them with `loom launch --nproc-per-node " +
                      stages + " -- loom train ...`");
  }
  if (world % pc.stages != 0) {
    throw ConfigError("config key 'parallel.pipeline.stages': " + stages +
                      " stages do not divide the " + std::to_string(world) +
                      " ranks; launch a multiple of " + stages + " (each group of " + stages +
                      " consecutive ranks runs one pipeline, and the pipelines run data parallel)");
  }
  const int replicas = world / static_cast<int>(pc.stages);
  if (config.train.grad_accum != 1) {
    throw ConfigError(
        "config key 'train.grad_accum': a pipeline accumulates over its "
        "micro-batches already; set parallel.pipeline.microbatches instead");
  }
  if (config.autotune.enabled) {
    throw ConfigError(
        "config key 'autotune.enabled': the autotuner does not tune pipelines; "
        "`loom pipeline plan` shows the partition and schedule to adjust by hand");
  }
  // The replicas share data.global_batch, and optimizer.lr scales with them, as in data
  // parallelism; the batch of one pipeline is then split into micro-batches.
  config = config_for_rank(std::move(config), replicas);
  if (config.data.batch_size % pc.microbatches != 0) {
    throw ConfigError("config key 'parallel.pipeline.microbatches': the batch of " +
                      std::to_string(config.data.batch_size) +
                      " samples (data.batch_size) does not split into " +
                      std::to_string(pc.microbatches) + " equal micro-batches");
  }
  config.data.batch_size /= pc.microbatches;
  config.train.grad_accum = pc.microbatches;
  return config;
}

std::vector<int> shared_split(comm::Communicator* comm, std::vector<int> split, int stages) {
  if (!comm) return split;
  at::Tensor t = at::zeros({stages}, at::kLong);
  if (comm->rank() == 0) {
    for (int s = 0; s < stages; ++s) t[s] = split[static_cast<size_t>(s)];
  }
  comm->broadcast(t, 0)->wait(comm->options().timeout);
  std::vector<int> out;
  for (int s = 0; s < stages; ++s) out.push_back(static_cast<int>(t[s].item<int64_t>()));
  return out;
}

PipelineLayout agree_on_pipeline_layout(const Config& config, const Topology& topology,
                                        comm::Communicator& comm) {
  // The plan prices the step's batch, as `loom pipeline plan` does.
  Config step = config;
  step.data.batch_size *= step.train.grad_accum;
  step.train.grad_accum = 1;
  PipelineLayout layout;
  // First on every rank: a schedule that cannot run fails everywhere alike.
  layout.schedule = pipeline_schedule(step.parallel.pipeline);
  std::vector<int> split;
  if (comm.rank() == 0) {
    const PipelinePlan plan = plan_pipeline(step, topology);
    layout.plan_text = describe_plan(plan);
    layout.better_microbatches = plan.better_microbatches;
    layout.better_bubble = plan.better_bubble;
    split = plan.partition.split_counts();
  }
  layout.split = shared_split(&comm, split, layout.schedule.stages);
  return layout;
}

StageTensors keep_own_stages(const std::vector<std::vector<models::Block>>& stages,
                             const pp::Schedule& schedule, int rank) {
  StageTensors own;
  at::NoGradGuard no_grad;
  for (size_t s = 0; s < stages.size(); ++s) {
    const bool ours = schedule.stage_rank[s] == rank;
    for (const models::Block& b : stages[s]) {
      if (ours) {
        own.parameters.insert(own.parameters.end(), b.parameters.begin(), b.parameters.end());
        own.buffers.insert(own.buffers.end(), b.buffers.begin(), b.buffers.end());
        continue;
      }
      for (const auto& [name, p] : b.parameters) p.set_data(at::empty({0}, p.options()));
      for (const auto& [name, t] : b.buffers) t.set_data(at::empty({0}, t.options()));
    }
  }
  return own;
}

void clip_grad_norm_across(const models::NamedTensors& parameters, double max_norm,
                           comm::Communicator& comm) {
  // The norm of the per-gradient norms, as clip_grad_norm_ computes it; their squares are
  // summed in double, so the sum over ranks is the same whichever rank adds first.
  double squares = 0;
  for (const auto& [name, p] : parameters) {
    if (!p.grad().defined()) continue;
    const double norm = p.grad().norm().item<double>();
    squares += norm * norm;
  }
  at::Tensor total = at::tensor({squares}, at::kDouble);
  comm.allreduce(total, comm::ReduceOp::kSum)->wait(comm.options().timeout);
  const double norm = std::sqrt(total.item<double>());
  const double coefficient = max_norm / (norm + 1e-6);
  if (coefficient >= 1.0) return;
  at::NoGradGuard no_grad;
  for (const auto& [name, p] : parameters) {
    if (p.grad().defined()) p.mutable_grad().mul_(coefficient);
  }
}

std::vector<double> peak_bytes_by_rank(comm::Communicator* comm) {
  const int world = comm ? comm->world() : 1;
  at::Tensor peaks = at::zeros({world}, at::kDouble);
  if (const CachingCpuAllocator* a = installed_caching_cpu_allocator()) {
    peaks[comm ? comm->rank() : 0] = static_cast<double>(a->stats().peak_bytes_in_use);
  }
  if (comm) comm->allreduce(peaks, comm::ReduceOp::kSum)->wait(comm->options().timeout);
  return std::vector<double>(peaks.data_ptr<double>(), peaks.data_ptr<double>() + world);
}

models::NamedTensors gather_on_rank0(comm::Communicator& comm, const models::NamedTensors& mine) {
  if (comm.rank() != 0) {
    comm::PendingSends sends;
    comm::send_named_tensors(comm, mine, 0, sends);
    sends.wait_all(comm.options().timeout);
    return {};
  }
  models::NamedTensors all = mine;
  for (int r = 1; r < comm.world(); ++r) {
    for (auto& named : comm::recv_named_tensors(comm, r)) all.push_back(std::move(named));
  }
  return all;
}

}  // namespace loom::train
