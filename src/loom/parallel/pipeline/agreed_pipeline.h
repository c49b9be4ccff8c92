// What every rank of a pipeline run (parallel.pipeline.stages > 1) agrees on before the first
// step: the schedule and the blocks per stage, and what the plan chose to fit the memory cap.
// Rank 0 plans (pipeline_plan.h); the layout itself is pipeline_layout.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/comm/communicator.h"
#include "loom/core/config.h"
#include "loom/core/topology.h"
#include "loom/parallel/pipeline/pipeline_plan.h"
#include "loom/parallel/pipeline/schedule.h"

namespace loom::parallel::pipeline {

struct AgreedPipeline {
  Schedule schedule;
  std::vector<int> split;  // blocks per stage
  // The plan recomputes every k-th block to fit the memory cap (1: every block; 0: as
  // configured).
  int64_t recompute_every = 0;
  int zero = 0;           // the plan shards over the replicas (ZeRO stage) to fit it; 0: not
  std::string plan_text;  // rank 0: the plan as `loom pipeline plan` prints it
  // Rank 0: a micro-batch count the plan simulated with a smaller bubble (0: none), and that
  // bubble; for the advisor.
  int64_t better_microbatches = 0;
  double better_bubble = 0;
};

// Rank 0 plans steps of `step_batch` samples per pipeline (profiles the blocks, partitions
// under the memory cap or checks parallel.pipeline.split, simulates) while the others wait;
// every rank gets its split and builds the same schedule. The loader reads micro-batches of
// step_batch / M, M of them per step, so a checkpoint's loader position means the same as in
// one process with that micro-batch and accumulation (parallel::plan_layout). Rank 0 profiles
// the model that `model_on_batch` makes (plan_pipeline); the others do not call it.
AgreedPipeline agree_on_pipeline(const Config& config, int64_t step_batch, const Topology& topology,
                                 const MakeModelOnBatch& model_on_batch, comm::Communicator& comm);

}  // namespace loom::parallel::pipeline
