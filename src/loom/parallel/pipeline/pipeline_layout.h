// Pipelines as a ParallelLayout: P x D ranks run D pipelines of P stages as data-parallel
// replicas; with a tensor dimension (T x P x D ranks) each stage's layers are split over a tensor
// group of T ranks, each of which runs the pipeline with the same-numbered ranks of the other
// stages (its pipeline group). A parameter that blocks of different ranks read (a language model's
// embedding, tied to its head) is kept on each of them and their gradients are summed after every
// step's backward, as Megatron-LM does; each copy then takes the same optimizer step. The mesh
// (parallel/mesh.h) places rank (d, p, t) at (d P + p) T + t: pipeline d's ranks are dPT ..
// (d + 1)PT - 1, every T-th of them one pipeline group (consecutive without tensor groups), and
// the ranks of one stage and tensor rank in every pipeline form its replica group, over which
// that stage's gradients are summed. Each rank keeps
// (trains, saves, evaluates) only its own stages' tensors (its slices of them under tensor
// parallelism); checkpoints gather every stage's on rank 0 under the model's own names: each
// stage's replicas' ZeRO shards first, then its tensor group's slices, then the stages (the
// pieces applied in the order pipeline, tensor, data, as torchtitan splits the stages first and
// then parallelizes each, and undone the other way: layout_piece.h).
#pragma once

#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "loom/comm/communicator.h"
#include "loom/parallel/data_parallel.h"
#include "loom/parallel/data_replicas.h"
#include "loom/parallel/parallel_layout.h"
#include "loom/parallel/pipeline/pipeline_executor.h"
#include "loom/parallel/pipeline/pipeline_stages.h"
#include "loom/parallel/pipeline/schedule.h"
#include "loom/parallel/pipeline/tied_parameters.h"
#include "loom/parallel/tensor_ranks.h"

namespace loom::parallel::pipeline {

struct PipelineLayoutOptions {
  Schedule schedule;                  // the same on every rank
  std::vector<int> split;             // blocks per stage
  DataParallelOptions data_parallel;  // how a stage's replicas exchange gradients
  // What rank 0 planned: the plan in words, and a micro-batch count simulated with a smaller
  // bubble (0: none) with that bubble.
  std::string plan_text;
  int64_t better_microbatches = 0;
  double better_bubble = 0;
  // Samples in an evaluation batch (data.eval_batch_size): evaluation feeds them through in
  // pieces of a training micro-batch. 0: whole batches.
  int64_t eval_batch = 0;
};

class PipelineLayout : public ParallelLayout {
 public:
  // `job` holds every rank (P x D); with several pipelines `make_group` joins this rank's
  // pipeline and stage groups (collective). `job` and `model` must outlive the layout. Drops
  // the tensors of other ranks' stages from `model`: they need no memory here.
  PipelineLayout(LayoutPlan plan, models::Model& model, comm::Communicator& job,
                 const comm::MakeGroup& make_group, PipelineLayoutOptions options);
  ~PipelineLayout() override;

  void start(const StartOptions& options) override;
  void forward_only(int64_t batches, const MicroBatchSource& batch,
                    const OutputSink& output) override;
  std::string manifest_json() const override;
  LayoutReport report() override;

 private:
  comm::Communicator& pipeline() const { return pipeline_group_ ? *pipeline_group_ : job_; }
  models::Model& model_;
  comm::Communicator& job_;
  PipelineLayoutOptions options_;
  std::vector<std::vector<models::Block>> stages_;
  TiedParameters tied_;                  // held on several of the pipeline's ranks
  std::unique_ptr<TensorRanks> tensor_;  // this rank's tensor group, under tensor parallelism
  // With several pipelines, or tensor groups: this rank's pipeline and its stage's replicas.
  std::unique_ptr<comm::Communicator> pipeline_group_, replica_group_;
  PipelineExecutor* executor_of_schedule_ = nullptr;  // executor_, once started
  std::unique_ptr<PipelineStages> stages_piece_;      // the stages' checkpoints
  std::unique_ptr<DataReplicas> data_;  // this rank's stages over their replicas (and ZeRO)
};

// The parameters and buffers of the stages `rank` runs, under the model's names, and the
// parameters of other stages that its blocks read (tied_copies, also among `parameters`: it
// trains its copy). The tensors of the other ranks' stages are released (left empty): they need
// no memory here.
struct StageTensors {
  models::NamedTensors parameters, buffers;
  models::NamedTensors tied_copies;
};
StageTensors keep_own_stages(const std::vector<std::vector<models::Block>>& stages,
                             const Schedule& schedule, int rank);

// Every rank's peak of tensor memory in use (caching allocator; 0 without it), in rank order, on
// every rank of `comm` (null: this process alone).
std::vector<double> peak_bytes_by_rank(comm::Communicator* comm);

// The split rank 0 chose, for every rank of `comm` (null: `split` as it is).
std::vector<int> shared_split(comm::Communicator* comm, std::vector<int> split, int stages);

}  // namespace loom::parallel::pipeline
