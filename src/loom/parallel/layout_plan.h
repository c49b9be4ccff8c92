// How a job lays its ranks out and what one optimizer step is: the layout part of a run's plan
// (train/layout_factory.h's RunPlan adds a pipeline's agreed schedule, split and recompute),
// printable. plan_layout computes it from the configuration and the job's size,
// plan_script_pipeline from a script's own pipeline; for a pipeline with a memory cap, plan_run
// raises zero_stage to the pipeline plan's choice before anything is built. Everything the run
// derives about its ranks and steps (the batch a rank's loader reads, the micro-batches of a
// step, the learning-rate scale, which ranks serve, the ZeRO stage) lives here; the
// configuration itself is never rewritten to carry it.
//
//   one process       1 rank; a step is train.grad_accum micro-batches of data.batch_size
//   data parallel     R ranks, each a replica of the model; data.global_batch (when set) is
//                     shared by them, else each reads data.batch_size; parallel.zero: 1 shards
//                     the optimizer state over the replicas, 2 the gradients too (ZeRO)
//   parameter servers the last parallel.ps.servers ranks serve; the others are data-parallel
//                     workers whose gradients go to the servers
//   pipeline          P x D ranks run D pipelines of P stages (data-parallel replicas); the
//                     step's batch of a pipeline is split into parallel.pipeline.microbatches
#pragma once

#include <cstdint>
#include <string>

#include "loom/core/config.h"

namespace loom::parallel {

enum class LayoutMode { kLocal, kDataParallel, kParameterServers, kPipeline };
inline constexpr LayoutMode kLayoutModes[] = {LayoutMode::kLocal, LayoutMode::kDataParallel,
                                              LayoutMode::kParameterServers, LayoutMode::kPipeline};
enum class PsMode { kSync, kAsync, kSsp };

const char* layout_mode_name(LayoutMode mode);  // "local", "data_parallel", ...
const char* ps_mode_name(PsMode mode);          // "sync", "async", "ssp"

// The samples of one optimizer step.
struct StepShape {
  int64_t global_batch = 0;   // over every replica
  int64_t replica_batch = 0;  // one replica's (one rank's, or one pipeline's)
  int64_t micro_batch = 0;    // what the loader reads at a time: replica_batch / micro_batches
  int64_t micro_batches = 1;  // per step: train.grad_accum, or a pipeline's micro-batches
};

struct LayoutPlan {
  LayoutMode mode = LayoutMode::kLocal;
  int world = 1;     // every rank of the job, servers included
  int rank = 0;      // this process's
  int trainers = 1;  // ranks that train (world - servers)
  StepShape step;
  // Data-parallel copies of the model (trainers / pipeline stages), and this rank's.
  int replicas = 1;
  int replica = 0;
  double lr_scale = 1;  // optimizer.lr_scaling: linear multiplies lr by the replicas
  // Parameter servers.
  int servers = 0;
  PsMode ps_mode = PsMode::kSync;
  int64_t staleness = 0;  // SSP's bound (sync with the optimizer on servers: 0)
  bool optimizer_on_server = false;
  // Pipelines: ranks per pipeline (P), and this rank's place in its pipeline.
  int pipeline_ranks = 0;
  int pipeline_rank = 0;
  // All-reduce data parallelism with the optimizer state (1) and the gradients (2) sharded over
  // the ranks (ZeRO); 0: not sharded.
  int zero_stage = 0;

  bool serves() const { return mode == LayoutMode::kParameterServers && rank >= trainers; }
  // The servers keep the parameters (async, SSP, or the optimizer on the servers) rather than
  // only summing gradients.
  bool servers_hold_parameters() const {
    return servers > 0 && (ps_mode != PsMode::kSync || optimizer_on_server);
  }
  // Ranks step together (everything but async and SSP servers).
  bool lockstep() const { return !(servers > 0 && ps_mode != PsMode::kSync); }
  // The configuration key that sets the micro-batches of a step, for messages.
  const char* micro_batches_key() const {
    return mode == LayoutMode::kPipeline ? "parallel.pipeline.microbatches" : "train.grad_accum";
  }
  // "data parallel over 2 ranks: 64 samples a step, 32 a replica (1 x 32)"
  std::string describe() const;
  // How a run of this plan is laid out, for a checkpoint's manifest (JSON): {"ranks": the
  // training ranks, "data_parallel": the replicas}. A pipeline's layout adds its stages
  // (PipelineLayout::manifest_json).
  std::string manifest_json() const;
};

// The plan of rank `rank` of a job of `world` ranks. Throws ConfigError naming the key when the
// configuration cannot be laid out so: a global batch that does not divide over the replicas, a
// pipeline whose stages do not divide the ranks, servers that leave no trainer, ...
LayoutPlan plan_layout(const Config& config, int world, int rank);

// The plan of rank `rank` of `trainers` training ranks that run pipelines of `pipeline_ranks`
// ranks (a script's own, loom.pipeline.Pipeline), whose steps are `microbatches` micro-batches
// of samples the script chooses (the step's batch is 0: not known beforehand). Throws
// ConfigError naming `pipeline_ranks` or `microbatches` when they cannot be laid out so.
LayoutPlan plan_script_pipeline(int trainers, int rank, int pipeline_ranks, int64_t microbatches);

}  // namespace loom::parallel
