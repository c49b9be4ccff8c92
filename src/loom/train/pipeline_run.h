// What changes when `loom train` runs as one rank of a pipeline (parallel.pipeline.stages > 1):
// the configuration the rank trains with, the layout all ranks agree on before the first step,
// the stage tensors a rank keeps, gradient clipping over every stage, and checkpoints gathered
// under the model's own names.
//
// A job of P x D ranks runs D pipelines of P stages as data-parallel replicas: ranks
// dP .. dP + P-1 form pipeline d, and stage ranks p of every pipeline exchange gradients.
#pragma once

#include <string>
#include <vector>

#include "loom/comm/communicator.h"
#include "loom/core/config.h"
#include "loom/core/topology.h"
#include "loom/models/model.h"
#include "loom/parallel/pipeline/schedule.h"

namespace loom::train {

// The configuration one of `world` pipeline ranks trains with: data.batch_size is one
// pipeline's step batch (data.global_batch, when set, is shared by the D pipelines, and
// optimizer.lr scales with them as optimizer.lr_scaling says), and the loader reads
// micro-batches of batch / M, M of them per step (train.grad_accum = M), so a checkpoint's
// loader position means the same as in one process with that micro-batch and accumulation.
// Throws ConfigError, naming the key, for what a pipeline cannot run: a world that is not a
// multiple of P, gradient accumulation on top of the micro-batches, a batch that does not
// split, autotuning.
Config config_for_pipeline(Config config, int world);

// What every rank of the pipeline runs: the schedule and the blocks per stage.
struct PipelineLayout {
  parallel::pipeline::Schedule schedule;
  std::vector<int> split;  // blocks per stage
  std::string plan_text;   // rank 0: the plan as `loom pipeline plan` prints it
  // Rank 0: a micro-batch count the plan simulated with a smaller bubble (0: none), and that
  // bubble; for the advisor.
  int64_t better_microbatches = 0;
  double better_bubble = 0;
};

// Rank 0 plans the configuration returned by config_for_pipeline (profiles the blocks,
// partitions under the memory cap or checks parallel.pipeline.split, simulates) while the
// others wait; every rank gets its split and builds the same schedule.
PipelineLayout agree_on_pipeline_layout(const Config& config, const Topology& topology,
                                        comm::Communicator& comm);

// The split rank 0 chose, for every rank of `comm` (null: `split` as it is).
std::vector<int> shared_split(comm::Communicator* comm, std::vector<int> split, int stages);

// The parameters and buffers of the stages `rank` runs, under the model's names. The tensors
// of the other ranks' stages are released (left empty): they need no memory here.
struct StageTensors {
  models::NamedTensors parameters, buffers;
};
StageTensors keep_own_stages(const std::vector<std::vector<models::Block>>& stages,
                             const parallel::pipeline::Schedule& schedule, int rank);

// Scales the gradients of `parameters` so that the norm over all of them, on every rank of
// `comm`, is at most `max_norm` (as torch's clip_grad_norm_ does for one process). Every rank
// calls it with its own parameters.
void clip_grad_norm_across(const models::NamedTensors& parameters, double max_norm,
                           comm::Communicator& comm);

// Every rank's peak of tensor memory in use (caching allocator; 0 without it), in rank order, on
// every rank of `comm` (null: this process alone).
std::vector<double> peak_bytes_by_rank(comm::Communicator* comm);

// Every rank's named tensors, on rank 0 (its own first, then rank 1's, ...); the other ranks
// send theirs and get nothing back.
models::NamedTensors gather_on_rank0(comm::Communicator& comm, const models::NamedTensors& mine);

}  // namespace loom::train
