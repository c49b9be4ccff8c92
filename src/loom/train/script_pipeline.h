// A script's own model split into pipeline stages (loom.pipeline.Pipeline): the model's blocks,
// its loss, a schedule by name (or CSV file) and a micro-batch count, run on the job's training
// ranks by the same PipelineLayout, validated schedule and PipelineExecutor as `loom train`'s
// pipelines. P x D ranks run D pipelines of P ranks (ranks dP .. dP+P-1 form pipeline d); each
// stage's gradients are averaged over the D pipelines, as torch's DDP averages replicas'.
//
// Per step every training rank calls step(); each pipeline's first rank passes the step's
// batch (inputs and targets, split along the first dimension into the micro-batches), the
// others pass nothing. The step clears the gradients of this rank's stages, runs the schedule
// (targets travel with the activations to the last stage, which computes the loss, scaled by
// 1/micro-batches), and leaves the gradients ready for the script's own optimizer step. Each
// rank keeps only its own stages' tensors; the other stages' are released.
//
// Threading: one thread (the script's); the blocks' forward may call back into Python.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "loom/core/step_phase.h"
#include "loom/models/loss.h"
#include "loom/models/model.h"
#include "loom/parallel/data_parallel.h"
#include "loom/parallel/layout_plan.h"
#include "loom/parallel/parallel_layout.h"
#include "loom/parallel/step_executor.h"
#include "loom/train/job.h"

namespace loom::train {

struct ScriptPipelineOptions {
  std::string schedule = "1f1b";  // gpipe | 1f1b | interleaved | zb_h1 | FILE.csv
  int64_t microbatches = 4;       // per step
  int pipeline_ranks = 0;         // P; 0: every training rank in one pipeline
  int chunks = 1;                 // stages per rank (interleaved)
  std::vector<int> split;         // blocks per stage; empty: counts as even as they can be
  parallel::DataParallelOptions data_parallel;  // how the pipelines average a stage's gradients
};

class ScriptPipeline {
 public:
  // Collective over the job's training ranks (the groups of P x D are joined here). Throws
  // ConfigError naming the argument when the layout, schedule or split cannot be.
  ScriptPipeline(Job& job, std::unique_ptr<models::Model> model, std::unique_ptr<models::Loss> loss,
                 ScriptPipelineOptions options);
  ~ScriptPipeline();

  // One step: the mean loss of the step's micro-batches and their samples (every rank of the
  // pipeline gets them). `inputs` and `targets` are read on the pipeline's first rank only.
  parallel::StepOutcome step(const at::Tensor& inputs, const at::Tensor& targets);

  // This rank's stages (ascending) and the tensors it trains and keeps.
  const std::vector<int>& own_stages() const;
  const models::NamedTensors& parameters() const;
  const models::NamedTensors& buffers() const;
  const parallel::LayoutPlan& plan() const;
  int stages() const;
  // The schedule's bubble, simulated with every stage taking the same time.
  double simulated_bubble() const;
  // "1f1b over 2 ranks, 4 micro-batches a step; stage 0: blocks 0-4 (rank 0); ...; simulated
  // bubble 20% with equal stage times"
  std::string describe() const;

  // Scales the gradients so that their norm over every stage is at most `max_norm`, as torch's
  // clip_grad_norm_ does in one process (collective over the pipeline).
  void clip_gradients(double max_norm);
  // Checkpoints: every stage's tensors (this rank's under the model's names, `model` and
  // `optimizer`) on the pipeline's first rank, which returns them all; nullopt on the others.
  // Collective over the pipeline; only the first pipeline's ranks take part (the others hold
  // the same stages).
  bool takes_part_in_checkpoints() const;
  std::optional<parallel::CheckpointTensors> gather(parallel::CheckpointTensors mine);
  // {"ranks", "data_parallel", "pipeline": {schedule, stages, split, ...}} for the manifest.
  std::string manifest_json() const;
  // Hears the step's phases (forward, backward, bubble, comm_exposed); null stops.
  void set_phase_sink(PhaseSink* sink);
  // After the last step (replicas end with the same parameters).
  void close();

 private:
  struct State;  // the model, loss, layout and observer (script_pipeline.cpp)
  std::unique_ptr<State> state_;
};

// Blocks per stage for `blocks` blocks over `stages` stages: `split` when given (checked), else
// as even as can be, the first stages taking one more. Throws ConfigError naming `split`.
std::vector<int> stage_split(int blocks, int stages, const std::vector<int>& split);

}  // namespace loom::train
