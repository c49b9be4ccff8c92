// A run's plan, and the ParallelLayout it asks for (parallel/parallel_layout.h), wired from the
// configuration: the gradient buckets, unused parameters and compression; the servers' part
// size and optimizer state; a pipeline's schedule and split. The plan is made before the run
// loads its data and model, because a pipeline's ranks first agree on the schedule and split
// (rank 0 profiles the model); make() then builds the layout around the run's model.
#pragma once

#include <memory>
#include <optional>

#include "loom/core/config.h"
#include "loom/models/model.h"
#include "loom/parallel/bucket_plan.h"
#include "loom/parallel/data_parallel.h"
#include "loom/parallel/layout_plan.h"
#include "loom/parallel/parallel_layout.h"
#include "loom/parallel/pipeline/agreed_pipeline.h"
#include "loom/train/trainer.h"

namespace loom::train {

// What a run will do, complete before anything is built and never changed after: the layout
// (ranks, the step's shape, the ZeRO stage) and, for a pipeline, the schedule, the split and
// what its plan chose to fit the memory cap (ZeRO over the pipelines, blocks recomputed).
struct RunPlan {
  parallel::LayoutPlan layout;
  std::optional<parallel::pipeline::AgreedPipeline> pipeline;
  // Every k-th block recomputes its activations in backward (0: none): as configured, or as
  // the pipeline's plan chose.
  int64_t recompute_every = 0;
};

// The plan of rank `rank` of a job of `world` ranks (servers included). Collective over the
// training ranks (options.groups.trainers) for a pipeline: rank 0 profiles the model and plans,
// the others wait for its choices. Throws ConfigError naming the key.
RunPlan plan_run(const Config& config, int world, int rank, const TrainOptions& options);

class LayoutFactory {
 public:
  // `options` (its communicators and groups) and `plan` must outlive the layouts made.
  LayoutFactory(const Config& config, const RunPlan& plan, const TrainOptions& options)
      : config_(config), plan_(plan), options_(options) {}

  const RunPlan& plan() const { return plan_; }
  // The layout around `model` (which must outlive it).
  std::unique_ptr<parallel::ParallelLayout> make(models::Model& model) const;

 private:
  const Config& config_;
  const RunPlan& plan_;
  const TrainOptions& options_;
};

}  // namespace loom::train
