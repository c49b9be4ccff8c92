// What a pipeline-parallel run of a configuration would do, worked out before anything runs:
// the schedule (generated or read from CSV, validated), every block of the model profiled on
// this machine with a real micro-batch, the partition into stages (optimal under the memory
// cap, or parallel.pipeline.split), and the simulated step. `loom pipeline plan` prints it.
// The model and its batch come from the caller (train/ loads the data and chooses the runtime;
// the layer rule keeps both from parallel/).
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "loom/core/config.h"
#include "loom/core/topology.h"
#include "loom/models/model.h"
#include "loom/parallel/pipeline/partitioner.h"
#include "loom/parallel/pipeline/schedule.h"
#include "loom/parallel/pipeline/simulator.h"

namespace loom::parallel::pipeline {

struct PipelinePlan {
  std::string model;
  int64_t microbatch_samples = 0;
  Schedule schedule;
  std::vector<BlockProfile> blocks;
  Partition partition;
  bool manual_split = false;  // from parallel.pipeline.split
  // No split fitted parallel.pipeline.memory_cap_mb with the activations kept, and recomputing
  // every k-th block (train.activation_checkpointing: every_k; 1: blocks) made one fit: the run
  // recomputes those. 0: as configured.
  int64_t recompute_every_chosen = 0;
  // Likewise ZeRO-1 over the data-parallel pipelines (1; 0: as configured), tried before
  // recompute: it costs little time (bench/RESULTS.md).
  int zero_chosen = 0;
  int replicas = 1;  // data-parallel pipelines the plan was made for
  // Ranks of the tensor group in each stage (parallel.tensor): the blocks were measured as one of
  // them runs its slices, their collectives priced at the link's speed (1: no tensor groups).
  int tensor_ranks = 1;
  double link_bytes_per_second = 0;  // single-thread memcpy here: ranks of one host over shm
  double resident_bytes = 0;         // every rank's data in memory, counted in each stage's memory
  std::vector<StageCosts> stage_costs;
  Simulation simulation;
  // The same profile split the usual ways, for comparison: slowest stage in seconds.
  double uniform_slowest_seconds = 0, parameter_balanced_slowest_seconds = 0;
  // When the bubble is large: more micro-batches of the same batch, simulated with the costs
  // scaled to the smaller micro-batches (0 when none helps or the batch does not divide).
  int64_t better_microbatches = 0;
  double better_bubble = 0, better_step_seconds = 0;

  double samples_per_second() const;
  // The job's ranks that run stage `stage`, laid out as the run lays them out (data x pipeline x
  // tensor, mesh.h): its pipeline rank's tensor group in every data-parallel pipeline.
  std::vector<int> stage_ranks(size_t stage) const;
};

// The configured model laid out as a run would lay it out (precision and memory format chosen,
// train mode), and the first training batch as the model takes it (float, normalised).
struct ModelOnBatch {
  std::unique_ptr<models::Model> model;
  // The type autocast computes products in, runtime.precision as chosen for this machine (kFloat:
  // fp32, no autocast).
  at::ScalarType autocast = at::kFloat;
  at::Tensor input, targets;
  c10::Device device = c10::kCPU;  // the model's and the batch's
  models::Task task = models::Task::kImageClassification;
  double data_bytes =
      0;  // the data set and loader buffers in memory (caching allocator; 0 on a GPU)
};

// Makes the model and the first batch of `batch_size` samples that the plan profiles, with
// every `recompute_every`-th block recomputing its activations in backward (0: none), as the
// configuration asks (models::recompute_every) or as the planner tries. It seeds LibTorch with
// config.seed first, so every process builds the same initial values. train/ gives it
// (train/pipeline_planning.h).
using MakeModelOnBatch = std::function<ModelOnBatch(int64_t batch_size, int64_t recompute_every)>;

// The plan for steps of `step_batch` samples (one pipeline's; data.batch_size for `loom pipeline
// plan`) of `replicas` data-parallel pipelines. Where no split fits the memory cap as
// configured, the plan tries, cheapest first: ZeRO-1 over the replicas (where there are several
// and parallel.zero is 0), recompute of every second block and then of every block (where
// train.activation_checkpointing is none), and ZeRO-1 with every block recomputed; the first
// that fits is the plan (zero_chosen, recompute_every_chosen). ZeRO-2 is not tried: a
// pipeline's peak holds the full gradients of its micro-batches either way. Throws ConfigError
// (naming the key, saying what would work) for a plan that cannot run.
// `model_on_batch` makes the model it profiles, once for each recompute setting it tries.
PipelinePlan plan_pipeline(const Config& config, int64_t step_batch, const Topology& topology,
                           const MakeModelOnBatch& model_on_batch, int replicas = 1);

// The plan in words: schedule, each stage's blocks, predicted time and memory, the simulated
// step and bubble, and the micro-batch count that would shrink a large bubble.
std::string describe_plan(const PipelinePlan& plan);

// The configured schedule: generated, or read from parallel.pipeline.schedule's CSV file (which
// must match the stages, chunks and micro-batches configured); validated. Throws ConfigError.
Schedule pipeline_schedule(const PipelineConfig& config);

// Blocks per stage from parallel.pipeline.split ("4,6"); empty for automatic.
std::vector<int> parse_split(const std::string& text);

}  // namespace loom::parallel::pipeline
