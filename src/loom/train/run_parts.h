// What one run of train() is made of, built once from its configuration and complete plan: the
// data, the model laid out for the runtime chosen (threads, precision, memory format), the
// parallel layout around it, the optimizer over what this rank steps, the losses and the
// feeder; and the figures the run reports of them (memory, the advisor's part).
//
// Threading: the training thread.
#pragma once

#include <torch/optim/optimizer.h>

#include <cstdint>
#include <memory>

#include "loom/core/config.h"
#include "loom/data/feeder.h"
#include "loom/models/loss.h"
#include "loom/models/model.h"
#include "loom/parallel/parallel_layout.h"
#include "loom/profile/advisor.h"
#include "loom/train/layout_factory.h"
#include "loom/train/train_data.h"
#include "loom/train/trainer.h"

namespace loom::train {

struct RunParts {
  TrainData data;
  std::unique_ptr<models::Model> model;
  std::unique_ptr<parallel::ParallelLayout> layout;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  std::unique_ptr<models::Loss> loss;       // training: with label smoothing
  std::unique_ptr<models::Loss> eval_loss;  // the test loss: plain cross-entropy
  std::unique_ptr<data::Feeder> feeder;
  // Of the whole model, before a tensor group splits it (0 without a tensor plan): what every
  // group's size must divide (its heads) and the share of its parameters a group of at least 2
  // ranks cuts.
  int64_t tensor_splits_by = 0;
  double tensor_split_share = 0;

  // Bytes of the optimizer state this rank holds (its shard under ZeRO), and of its gradients
  // (each tensor once: the parameters', and the shards' the optimizer steps under ZeRO).
  int64_t optimizer_state_bytes(const std::string& optimizer) const;
  int64_t gradient_bytes() const;
};

// Builds the parts of the run of replica `replica` of `replicas` (the stages of one pipeline
// read one share of the data), seeding LibTorch with config.seed first, and fills what `info`
// says of them (runtime, parameters, layout). `leader` warns of a slow BLAS once.
RunParts build_run_parts(const Config& config, const TrainOptions& options,
                         const LayoutFactory& layouts, int replica, int replicas, bool leader,
                         RunInfo& info);

// What the summary says of the run's parts: the input supply, the layout's report (with every
// worker's compute over the `steady` steps), the machine's peak rates, memory, FLOPs per sample
// (`forward_flops_per_sample` as this rank counted them) over the job's `world` training ranks.
void fill_parts_summary(const RunParts& parts, const RunInfo& info, const Config& config, int world,
                        double forward_flops_per_sample, const profile::StepTimes& steady,
                        TrainSummary& s);

// What the advisor reads of the run's parts, plan and summary `s` (RunAccounting adds the
// host's and the steps' part): threads, precision and layout, input supply, memory, parallelism.
profile::RunProfile parts_profile(const RunParts& parts, const Config& config, const RunPlan& plan,
                                  const RunInfo& info, const TrainSummary& s);

}  // namespace loom::train
