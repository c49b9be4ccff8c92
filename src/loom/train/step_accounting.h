// Step accounting for a training loop that is not Loom's own (a Python script's): the same
// phases, metrics.jsonl lines, TensorBoard scalars, Chrome trace and summary.json (with the
// advisor's findings) that `loom train` writes, so that `loom report`, `loom plan` and the advisor
// read a script's run as they read a `loom train` run. The loop says where a step begins and
// ends and which phase it is in; its loader (when Loom's) gives the input pipeline's counts, and
// the layout's pieces report into it as a PhaseSink: a Loom gradient exchange it watches its
// exposed waits as comm_exposed, a tensor group its collectives as tensor_comm, a pipeline its
// schedule's phases.
//
// Threading: the training thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "loom/comm/communicator.h"
#include "loom/core/config.h"
#include "loom/core/step_phase.h"
#include "loom/data/batch_source.h"
#include "loom/parallel/grad_sync.h"
#include "loom/parallel/layout_plan.h"
#include "loom/train/trainer.h"

namespace loom::train {

struct StepAccountingOptions {
  std::string out_dir;
  std::string model = "python";  // what the summary calls the model
  int64_t parameters = 0;        // the model's, for the summary
  std::string precision = "fp32";
  // A language model's tokens per sample (its window): tokens/s are reported too (0: none).
  int64_t tokens_per_sample = 0;
  // First steps left out of the steady state (allocator and oneDNN warm-up, threads starting).
  int64_t warmup_steps = 5;
  // The loop's Loom loader, for the input pipeline's counts (null: batches from elsewhere).
  data::BatchSource* source = nullptr;
  int loader_threads = 0;
  bool loader_decodes = false;  // the loader decodes encoded images
  // The layout the script trains under (one process when absent): the job's, or the one its
  // model's wrapper makes of the job's training ranks (a tensor group's ("data", D) x
  // ("tensor", T), a pipeline's). A step's samples are one replica's times its data.replicas:
  // a tensor group's or a pipeline's ranks share their replica's samples. And the job's
  // training ranks' communicator (null for one process); rank 0 writes the files.
  parallel::LayoutPlan plan;
  comm::Communicator* trainers = nullptr;
  // The job's ranks on this host, parameter servers included (Job::ranks_on_host).
  int ranks_on_host = 1;
};

class StepAccounting : public PhaseSink {
 public:
  // `config`: train.log_every, train.tensorboard and profile.* (the trace window).
  StepAccounting(const Config& config, StepAccountingOptions options);
  ~StepAccounting() override;

  // The loop's gradient exchange: its waits at the end of backward are comm_exposed, and its
  // buckets, bytes and overlap go into the summary. Watched until finish(), or until its owner
  // ends it.
  void watch_exchange(const std::shared_ptr<parallel::GradSync>& exchange);

  void begin_step();
  void enter(profile::Phase phase) override;
  // Ends the step whose replica (this rank's model, its tensor group's or its pipeline's)
  // trained on `replica_samples` samples, with this loss (NaN: not known), learning rate and
  // epoch: the step's samples are the replicas' (options' plan.data.replicas), each counted
  // once. Every train.log_every steps a metrics line.
  void end_step(int64_t replica_samples, double loss, double lr = 0.0, int64_t epoch = 0);
  // The run's summary, written to summary.json by rank 0 (collective over the trainers when
  // tracing: rank 0 merges their traces).
  TrainSummary finish();

  int64_t steps() const;

 private:
  struct State;  // the files and sums (step_accounting.cpp)
  std::unique_ptr<State> state_;
};

}  // namespace loom::train
