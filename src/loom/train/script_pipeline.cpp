#include "loom/train/script_pipeline.h"

#include <algorithm>
#include <numeric>
#include <sstream>

#include "loom/core/error.h"
#include "loom/parallel/pipeline/pipeline_layout.h"
#include "loom/parallel/pipeline/pipeline_plan.h"
#include "loom/parallel/pipeline/simulator.h"

namespace loom::train {
namespace pp = parallel::pipeline;

namespace {

// Passes the executor's phases on to whoever accounts the script's steps.
class PhaseForwarder : public parallel::StepObserver {
 public:
  void enter(Phase phase) override {
    if (sink_) sink_->enter(phase);
  }
  PhaseSink* sink_ = nullptr;
};

pp::Schedule script_schedule(const ScriptPipelineOptions& o, int pipeline_ranks) {
  PipelineConfig config;
  config.stages = pipeline_ranks;
  config.microbatches = o.microbatches;
  config.schedule = o.schedule;
  config.chunks = o.chunks;
  return pp::pipeline_schedule(config);
}

}  // namespace

std::vector<int> stage_split(int blocks, int stages, const std::vector<int>& split) {
  if (!split.empty()) {
    const int total = std::accumulate(split.begin(), split.end(), 0);
    const bool positive = std::all_of(split.begin(), split.end(), [](int n) { return n > 0; });
    if (static_cast<int>(split.size()) != stages || total != blocks || !positive) {
      throw ConfigError("split: " + std::to_string(split.size()) + " stages of " +
                        std::to_string(total) + " blocks in all; the pipeline has " +
                        std::to_string(stages) +
                        " stages of at least one block each, over the model's " +
                        std::to_string(blocks) + " blocks");
    }
    return split;
  }
  if (blocks < stages) {
    throw ConfigError("split: " + std::to_string(blocks) + " blocks cannot fill " +
                          std::to_string(stages) + " stages (pipeline ranks x chunks)",
                      {{"key", "split"},
                       {"problem", "too_few_blocks"},
                       {"value", std::to_string(blocks)},
                       {"stages", std::to_string(stages)}});
  }
  std::vector<int> even(static_cast<size_t>(stages), blocks / stages);
  for (int s = 0; s < blocks % stages; ++s) ++even[static_cast<size_t>(s)];
  return even;
}

struct ScriptPipeline::State {
  std::unique_ptr<models::Model> model;
  std::unique_ptr<models::Loss> loss;
  pp::PipelineLayoutOptions layout_options;
  std::unique_ptr<pp::PipelineLayout> layout;
  PhaseForwarder observer;
  std::vector<int> own_stages;
  int replicas = 1;  // pipelines (D)
  double bubble = 0;
};

ScriptPipeline::ScriptPipeline(Job& job, std::unique_ptr<models::Model> model,
                               std::unique_ptr<models::Loss> loss, ScriptPipelineOptions options)
    : state_(std::make_unique<State>()) {
  if (job.plan.servers) {
    throw ConfigError(
        "parallel.mode: a pipeline does not combine with parameter servers; start the job "
        "without --servers");
  }
  comm::Communicator* trainers = job.trainers();
  const int world = trainers ? trainers->world() : 1;
  const int rank = trainers ? trainers->rank() : 0;
  const int pipeline_ranks = options.pipeline_ranks > 0 ? options.pipeline_ranks : world;
  parallel::LayoutPlan plan =
      parallel::plan_script_pipeline(world, rank, pipeline_ranks, options.microbatches);
  if (options.chunks < 1) throw ConfigError("chunks: at least one stage per rank");

  State& s = *state_;
  s.model = std::move(model);
  s.loss = std::move(loss);
  pp::PipelineLayoutOptions& lo = s.layout_options;
  lo.schedule = script_schedule(options, pipeline_ranks);
  lo.split =
      stage_split(static_cast<int>(s.model->blocks().size()), lo.schedule.stages, options.split);
  lo.data_parallel = options.data_parallel;
  s.replicas = plan.data.replicas;
  s.bubble = pp::simulate(lo.schedule, pp::uniform_costs(lo.schedule.stages)).bubble_fraction;
  lo.plan_text = describe();  // before the layout: describe() reads the options only
  for (int stage = 0; stage < lo.schedule.stages; ++stage) {
    if (lo.schedule.stage_rank[static_cast<size_t>(stage)] == plan.pipeline->rank) {
      s.own_stages.push_back(stage);
    }
  }
  s.layout = std::make_unique<pp::PipelineLayout>(std::move(plan), *s.model, *trainers,
                                                  job.group_maker(), lo);
  parallel::StartOptions start;
  start.loss = s.loss.get();
  start.observer = &s.observer;
  s.layout->start(start);
}

ScriptPipeline::~ScriptPipeline() = default;

parallel::StepOutcome ScriptPipeline::step(const at::Tensor& inputs, const at::Tensor& targets) {
  const parallel::LayoutPlan& p = plan();
  const int64_t microbatches = p.step.micro_batches;
  if (p.pipeline->rank != 0) {
    return state_->layout->run_step([](int64_t) -> parallel::MicroBatch {
      throw Error("pipeline: only a pipeline's first rank reads the step's batch");
    });
  }
  const std::string where = "pipeline step (rank " + std::to_string(p.rank) + "): ";
  if (!inputs.defined() || !targets.defined()) {
    throw Error(where + "the first stage's rank needs the step's inputs and targets");
  }
  if (inputs.dim() == 0 || targets.dim() == 0 || inputs.size(0) != targets.size(0)) {
    throw Error(where + "inputs of shape " + c10::str(inputs.sizes()) + " and targets of shape " +
                c10::str(targets.sizes()) + " do not have the same first dimension");
  }
  const int64_t samples = inputs.size(0);
  if (samples % microbatches != 0 || samples == 0) {
    throw ConfigError("microbatches: the step's " + std::to_string(samples) +
                      " samples do not split into " + std::to_string(microbatches) +
                      " equal micro-batches");
  }
  const int64_t size = samples / microbatches;
  return state_->layout->run_step([&](int64_t k) {
    return parallel::MicroBatch{inputs.narrow(0, k * size, size),
                                targets.narrow(0, k * size, size)};
  });
}

const std::vector<int>& ScriptPipeline::own_stages() const { return state_->own_stages; }
const models::NamedTensors& ScriptPipeline::parameters() const {
  return state_->layout->parameters();
}
const models::NamedTensors& ScriptPipeline::buffers() const { return state_->layout->buffers(); }
const parallel::LayoutPlan& ScriptPipeline::plan() const { return state_->layout->plan(); }
int ScriptPipeline::stages() const { return state_->layout_options.schedule.stages; }
double ScriptPipeline::simulated_bubble() const { return state_->bubble; }

std::string ScriptPipeline::describe() const {
  const pp::PipelineLayoutOptions& lo = state_->layout_options;
  const pp::Schedule& schedule = lo.schedule;
  std::ostringstream out;
  out << schedule.name << " over " << schedule.ranks << " ranks";
  if (state_->replicas > 1) out << " (x " << state_->replicas << " pipelines, data parallel)";
  out << ", " << schedule.microbatches << " micro-batches a step; ";
  int first = 0;
  for (int stage = 0; stage < schedule.stages; ++stage) {
    const int blocks = lo.split[static_cast<size_t>(stage)];
    out << "stage " << stage << ": blocks " << first << "-" << first + blocks - 1 << " (rank "
        << schedule.stage_rank[static_cast<size_t>(stage)] << "); ";
    first += blocks;
  }
  out << "simulated bubble " << static_cast<int>(state_->bubble * 100 + 0.5)
      << "% with equal stage times";
  return out.str();
}

void ScriptPipeline::clip_gradients(double max_norm) { state_->layout->clip_gradients(max_norm); }
bool ScriptPipeline::takes_part_in_checkpoints() const {
  return state_->layout->takes_part_in_checkpoints();
}
std::optional<parallel::CheckpointTensors> ScriptPipeline::gather(
    parallel::CheckpointTensors mine) {
  return state_->layout->gather(std::move(mine));
}
std::string ScriptPipeline::manifest_json() const { return state_->layout->manifest_json(); }
void ScriptPipeline::set_phase_sink(PhaseSink* sink) { state_->observer.sink_ = sink; }
void ScriptPipeline::close() { state_->layout->end_training(); }

}  // namespace loom::train
