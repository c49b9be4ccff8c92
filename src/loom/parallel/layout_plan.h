// How a job lays its ranks out and what one optimizer step is: the layout part of a run's plan
// (train/layout_factory.h's RunPlan adds a pipeline's agreed schedule, split and recompute),
// printable. The training ranks form a mesh with named dimensions (mesh.h), each with its part
// of the plan: data (replicas, ZeRO stage 0-3) always, a pipeline, a tensor group and parameter
// servers where configured. plan_layout computes it from the configuration and the job's size,
// plan_script_pipeline from a script's own pipeline; for a pipeline with a memory cap, plan_run
// raises data.zero_stage to the pipeline plan's choice before anything is built. Everything the
// run derives about its ranks and steps (the batch a rank's loader reads, the micro-batches of a
// step, the learning-rate scale, which ranks serve, the ZeRO stage) lives here; the
// configuration itself is never rewritten to carry it.
//
//   one process       1 rank; a step is train.grad_accum micro-batches of data.batch_size
//   data parallel     R ranks, each a replica of the model; data.global_batch (when set) is
//                     shared by them, else each reads data.batch_size; parallel.zero: 1 shards
//                     the optimizer state over the replicas, 2 the gradients too, 3 the
//                     parameters too, gathered block by block as they run (ZeRO)
//   tensor            parallel.tensor: T ranks split each layer's matrices (and with
//                     parallel.tensor_sequence the sequence between them); the job's ranks
//                     form 1/T as many replicas, or run each pipeline stage on T ranks
//   parameter servers the last parallel.ps.servers ranks serve; the others are data-parallel
//                     workers whose gradients go to the servers
//   pipeline          P x D ranks run D pipelines of P stages (data-parallel replicas); the
//                     step's batch of a pipeline is split into parallel.pipeline.microbatches
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "loom/core/config.h"
#include "loom/parallel/mesh.h"

namespace loom::parallel {

enum class PsMode { kSync, kAsync, kSsp };

const char* ps_mode_name(PsMode mode);  // "sync", "async", "ssp"

// The samples of one optimizer step.
struct StepShape {
  int64_t global_batch = 0;   // over every replica
  int64_t replica_batch = 0;  // one replica's (one rank's, or one pipeline's)
  int64_t micro_batch = 0;    // what the loader reads at a time: replica_batch / micro_batches
  int64_t micro_batches = 1;  // per step: train.grad_accum, or a pipeline's micro-batches
};

// ZeRO-3: which blocks keep their gathered parameters from forward until their backward
// (sharded_model.h).
enum class KeepAfterForward { kNone, kLast, kAll };
// parallel.zero3_keep's words: none, last, all. Throws ConfigError naming the key otherwise.
KeepAfterForward keep_after_forward(const std::string& word);

// The data dimension: copies of the model (or of a pipeline) that share each step's batch.
struct DataDim {
  int replicas = 1;
  int replica = 0;  // this rank's
  // The optimizer state (1), the gradients too (2) and the parameters too (3) sharded over the
  // replicas (ZeRO); 0: not.
  int zero_stage = 0;
  KeepAfterForward zero3_keep = KeepAfterForward::kLast;
  double lr_scale = 1;  // optimizer.lr_scaling: linear multiplies lr by the replicas
};

// The pipeline dimension: `ranks` ranks run the model's stages in turn; this rank is the
// `rank`-th of its pipeline.
struct PipelineDim {
  int ranks = 2;
  int rank = 0;
};

// The tensor dimension: `ranks` ranks split each transformer layer between them (the mesh's
// innermost dimension: a tensor group's ranks are neighbours); this rank is the `rank`-th.
// `sequence`: the layers' regions between their split products are split by the sequence too
// (parallel.tensor_sequence).
struct TensorDim {
  int ranks = 2;
  int rank = 0;
  bool sequence = false;
};

// Parameter servers: the job's last `servers` ranks, outside the training ranks' mesh.
struct ServerDim {
  int servers = 1;
  PsMode mode = PsMode::kSync;
  int64_t staleness = 0;  // SSP's bound (sync with the optimizer on servers: 0)
  bool optimizer_on_server = false;
};

// A job's ranks as a mesh with named dimensions, each with its own part of the plan: data (the
// replicas and their ZeRO stage) always, a pipeline and parameter servers where configured. The
// layouts (parallel_layout.h) apply them: the data dimension through its piece (data_replicas.h),
// a pipeline as PipelineLayout, servers through the exchange make_replica_sync makes.
struct LayoutPlan {
  int world = 1;     // every rank of the job, servers included
  int rank = 0;      // this process's
  int trainers = 1;  // ranks that train (world - servers): the mesh's
  StepShape step;
  Mesh mesh;  // the training ranks: ("data", D) [x ("pipeline", P)] [x ("tensor", T)]
  DataDim data;
  std::optional<PipelineDim> pipeline;
  std::optional<TensorDim> tensor;
  std::optional<ServerDim> servers;

  bool serves() const { return servers && rank >= trainers; }
  // The servers keep the parameters (async, SSP, or the optimizer on the servers) rather than
  // only summing gradients.
  bool servers_hold_parameters() const {
    return servers && (servers->mode != PsMode::kSync || servers->optimizer_on_server);
  }
  // Ranks step together (everything but async and SSP servers).
  bool lockstep() const { return !(servers && servers->mode != PsMode::kSync); }
  // The configuration key that sets the micro-batches of a step, for messages.
  const char* micro_batches_key() const {
    return pipeline ? "parallel.pipeline.microbatches" : "train.grad_accum";
  }
  // The run in words, each dimension saying its part (innermost first: what one replica is,
  // then the replicas), and its step: "data parallel over 2 ranks: 64 samples a step, 32 a
  // replica (1 x 32)", "tensor parallel over 2 ranks, data parallel over 2 such groups
  // (optimizer state sharded, ZeRO-1): ...; mesh data 2 x tensor 2".
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
