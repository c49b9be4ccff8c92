// What every rank of a pipeline run (parallel.pipeline.stages > 1) agrees on before the first
// step: the schedule and the blocks per stage. Rank 0 plans (train/pipeline_plan.h); the
// layout itself is parallel/pipeline/pipeline_layout.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/comm/communicator.h"
#include "loom/core/config.h"
#include "loom/core/topology.h"
#include "loom/parallel/pipeline/schedule.h"

namespace loom::train {

struct AgreedPipeline {
  parallel::pipeline::Schedule schedule;
  std::vector<int> split;  // blocks per stage
  // The plan recomputes every k-th block to fit the memory cap (1: every block; 0: as
  // configured).
  int64_t recompute_every = 0;
  int zero = 0;            // the plan shards over the replicas (ZeRO stage) to fit it; 0: not
  std::string plan_text;   // rank 0: the plan as `loom pipeline plan` prints it
  // Rank 0: a micro-batch count the plan simulated with a smaller bubble (0: none), and that
  // bubble; for the advisor.
  int64_t better_microbatches = 0;
  double better_bubble = 0;
};

// Rank 0 plans steps of `step_batch` samples per pipeline (profiles the blocks, partitions
// under the memory cap or checks parallel.pipeline.split, simulates) while the others wait;
// every rank gets its split and builds the same schedule. The loader reads micro-batches of
// step_batch / M, M of them per step, so a checkpoint's loader position means the same as in
// one process with that micro-batch and accumulation (parallel::plan_layout).
AgreedPipeline agree_on_pipeline(const Config& config, int64_t step_batch, const Topology& topology,
                                 comm::Communicator& comm);

}  // namespace loom::train
