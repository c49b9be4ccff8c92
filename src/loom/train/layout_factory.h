// The ParallelLayout a run's plan asks for (parallel/parallel_layout.h), wired from the
// configuration: the gradient buckets, unused parameters and compression; the servers' part
// size and optimizer state; a pipeline's schedule and split. The factory is made before the
// run loads its data and model, because a pipeline's ranks first agree on the schedule and split
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
#include "loom/train/pipeline_run.h"
#include "loom/train/trainer.h"

namespace loom::train {

// parallel.* as data parallelism's options.
parallel::DataParallelOptions data_parallel_options(const ParallelConfig& config);

class LayoutFactory {
 public:
  // Collective over the training ranks when the plan is a pipeline's. `options` (its
  // communicators and groups) must outlive the layouts made.
  LayoutFactory(const Config& config, parallel::LayoutPlan plan, const TrainOptions& options);

  const parallel::LayoutPlan& plan() const { return plan_; }
  // Blocks recomputed in backward (models::Model::set_recompute_every): as configured, or as the
  // pipeline's plan chose to fit its memory cap.
  int64_t recompute_every() const;
  // The layout around `model` (which must outlive it).
  std::unique_ptr<parallel::ParallelLayout> make(models::Model& model) const;

 private:
  const Config& config_;
  parallel::LayoutPlan plan_;
  const TrainOptions& options_;
  std::optional<AgreedPipeline> pipeline_;
};

}  // namespace loom::train
