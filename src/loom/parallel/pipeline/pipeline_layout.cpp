#include "loom/parallel/pipeline/pipeline_layout.h"

#include <ATen/ATen.h>
#include <ATen/DeviceAccelerator.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

#include "loom/comm/tensor_message.h"
#include "loom/core/caching_allocator.h"
#include "loom/core/error.h"

namespace loom::parallel::pipeline {
namespace {

// The pipeline executor, then the tied parameters' gradients summed between their copies.
class SumTiedAfterStep : public StepExecutor {
 public:
  SumTiedAfterStep(std::unique_ptr<StepExecutor> inner, const TiedParameters& tied,
                   comm::Communicator& comm, const ZeroPartition* zero, c10::Device device)
      : inner_(std::move(inner)), tied_(tied), comm_(comm), zero_(zero), device_(device) {}
  int64_t micro_batches() const override { return inner_->micro_batches(); }
  StepOutcome run(const MicroBatchSource& micro_batch) override {
    const StepOutcome outcome = inner_->run(micro_batch);
    tied_.sum_gradients(comm_, zero_, device_);
    return outcome;
  }
  void set_loss_scale(double scale) override { inner_->set_loss_scale(scale); }

 private:
  std::unique_ptr<StepExecutor> inner_;
  const TiedParameters& tied_;
  comm::Communicator& comm_;
  const ZeroPartition* zero_;  // the copies' gradient shards are summed, under ZeRO
  c10::Device device_;         // where they are summed
};

}  // namespace

PipelineLayout::PipelineLayout(LayoutPlan plan, models::Model& model, comm::Communicator& job,
                               const comm::MakeGroup& make_group, PipelineLayoutOptions options)
    : ParallelLayout(std::move(plan)), model_(model), job_(job), options_(std::move(options)) {
  if (plan_.data.replicas > 1 || plan_.tensor) {
    if (!make_group) throw Error("pipeline: a pipeline x data or tensor run needs groups");
    // Every rank joins its tensor group first (which splits the model's layers), then its
    // pipeline, then its stage's replicas: the groups of each round are disjoint, so no rank
    // waits on one that is busy joining another.
    if (plan_.tensor) tensor_ = std::make_unique<TensorRanks>(plan_, model, make_group);
    const Mesh& mesh = plan_.mesh;
    const int rank = plan_.rank;
    pipeline_group_ =
        make_group(mesh.group(rank, kPipelineDim), mesh.group_name(rank, kPipelineDim));
    replica_group_ = make_replica_group(plan_, make_group);
  }
  stages_ = stage_blocks(model.blocks(), options_.split);
  tied_ = TiedParameters(stages_, options_.schedule, pipeline().rank());
  StageTensors own = keep_own_stages(stages_, options_.schedule, pipeline().rank());
  parameters_ = std::move(own.parameters);
  buffers_ = std::move(own.buffers);
  std::set<std::string> held, tied_copies;
  for (const auto* list : {&parameters_, &buffers_}) {
    for (const auto& [name, t] : *list) held.insert(name);
  }
  for (const auto& [name, t] : own.tied_copies) tied_copies.insert(name);
  stages_piece_ = std::make_unique<PipelineStages>(pipeline(), options_.schedule.stage_rank.back(),
                                                   std::move(held), std::move(tied_copies));
  data_ = std::make_unique<DataReplicas>(plan_.data, replica_group_.get(), parameters_,
                                         options_.data_parallel, nullptr, tied_.names());
  plan_text_ = options_.plan_text;
  parts_.trainers = &job_;
  parts_.stages = &pipeline();
  parts_.data = data_.get();
  parts_.applied = {stages_piece_.get()};
  if (tensor_) parts_.applied.push_back(tensor_.get());
  parts_.applied.push_back(data_.get());
}

PipelineLayout::~PipelineLayout() {
  // The exchange and the executor (the base's) use the groups this layout owns: they go first.
  executor_.reset();
  grad_sync_.reset();
}

void PipelineLayout::start(const StartOptions& options) {
  device_ = options.device;
  // Each stage's gradients are summed over the pipelines (replicas), from its last backward.
  grad_sync_ = data_->make_sync(parameters_, buffers_, options_.data_parallel);
  PipelineExecutorOptions executor;
  executor.autocast = options.autocast;
  executor.count_targets = options.count_targets;
  // The run's device (one type on every rank: messages, the loss and the tied sums travel on it);
  // where the caller gives none, the one the model was moved to before the layout cut it.
  executor.device = options.device;
  if (executor.device.is_cpu() && !parameters_.empty()) {
    executor.device = parameters_.front().second.device();
  }
  const c10::Device device = executor.device;
  const models::Loss& loss = training_loss(*options.loss);
  if (tensor_) tensor_->set_phase_sink(options.observer);
  auto pipelined = std::make_unique<PipelineExecutor>(options_.schedule, stages_, loss, *grad_sync_,
                                                      pipeline(), *options.observer, executor);
  executor_of_schedule_ = pipelined.get();
  if (tied_.empty()) {
    executor_ = std::move(pipelined);
  } else {
    executor_ = std::make_unique<SumTiedAfterStep>(std::move(pipelined), tied_, pipeline(),
                                                   data_->partition(), device);
  }
  // The ranks report the memory their stages take while training, not rank 0's planning of the
  // whole model (on its GPU, where the run trains on one).
  if (const CachingCpuAllocator* a = installed_caching_cpu_allocator()) a->reset_peak();
  if (!device.is_cpu()) at::accelerator::resetPeakStats(device.index());
}

void PipelineLayout::forward_only(int64_t batches, const MicroBatchSource& batch,
                                  const OutputSink& output) {
  // Evaluation batches go through in pieces of a training micro-batch, whose activations the
  // memory model (and so parallel.pipeline.memory_cap_mb) allows for; the outputs are tallied
  // piece by piece as the whole batch's would be. Every rank counts the same pieces per batch
  // (from the configured size: a short last batch has empty pieces), though only the first
  // stage reads the data.
  const int64_t piece = std::max<int64_t>(1, plan_.step.micro_batch);
  const int64_t pieces = std::max<int64_t>(1, (options_.eval_batch + piece - 1) / piece);
  MicroBatch whole;
  int64_t loaded = -1;
  const auto piece_of = [&](int64_t k) {
    const int64_t b = k / pieces, p = k % pieces;
    if (b != loaded) whole = batch(b), loaded = b;
    const int64_t rows = whole.targets.defined() ? whole.targets.size(0) : 0;
    const int64_t start = std::min(rows, p * piece), n = std::min(piece, rows - start);
    MicroBatch part;
    part.targets =
        whole.targets.defined() ? whole.targets.narrow(0, start, n) : at::empty({0}, at::kLong);
    if (n > 0 && whole.input.defined()) part.input = whole.input.narrow(0, start, n);
    return part;
  };
  // A last stage whose output is split (over its tensor group) puts it together, every rank of
  // the group in step, before it is tallied.
  const OutputSink made_whole = [&](const at::Tensor& logits, const at::Tensor& targets) {
    output(whole_output(logits), targets);
  };
  model_.train(false);
  executor_of_schedule_->forward_only(batches * pieces, piece_of, made_whole);
  model_.train(true);
}

std::string PipelineLayout::manifest_json() const {
  // The plan's part (ranks, replicas), then the pipeline's.
  const Schedule& schedule = options_.schedule;
  nlohmann::ordered_json manifest = nlohmann::ordered_json::parse(plan_.manifest_json());
  manifest["pipeline"] = {{"ranks", schedule.ranks},
                          {"stages", schedule.stages},
                          {"schedule", schedule.name},
                          {"microbatches", schedule.microbatches},
                          {"split", options_.split}};
  return manifest.dump();
}

LayoutReport PipelineLayout::report() {
  LayoutReport r = ParallelLayout::report();
  r.schedule = options_.schedule.name;
  for (int blocks : options_.split)
    r.split += (r.split.empty() ? "" : ",") + std::to_string(blocks);
  r.plan_text = options_.plan_text;
  r.better_microbatches = options_.better_microbatches;
  r.better_bubble = options_.better_bubble;
  r.peak_bytes = peak_bytes_by_rank(&pipeline());
  return r;
}

std::vector<int> shared_split(comm::Communicator* comm, std::vector<int> split, int stages) {
  if (!comm) return split;
  at::Tensor t = at::zeros({stages}, at::kLong);
  if (comm->rank() == 0) {
    for (int s = 0; s < stages; ++s) t[s] = split[static_cast<size_t>(s)];
  }
  comm->broadcast(t, 0)->wait(comm->options().timeout);
  std::vector<int> out;
  for (int s = 0; s < stages; ++s) out.push_back(static_cast<int>(t[s].item<int64_t>()));
  return out;
}

StageTensors keep_own_stages(const std::vector<std::vector<models::Block>>& stages,
                             const Schedule& schedule, int rank) {
  // What this rank's stages own, and what they read of other stages' (tied parameters).
  std::set<std::string> owned, kept;
  for (size_t s = 0; s < stages.size(); ++s) {
    if (schedule.stage_rank[s] != rank) continue;
    for (const models::Block& b : stages[s]) {
      for (const auto* list : {&b.parameters, &b.buffers}) {
        for (const auto& [name, t] : *list) owned.insert(name);
      }
      for (const auto& [name, t] : b.tied) kept.insert(name);
    }
  }
  kept.insert(owned.begin(), owned.end());
  StageTensors own;
  at::NoGradGuard no_grad;
  for (size_t s = 0; s < stages.size(); ++s) {
    const bool ours = schedule.stage_rank[s] == rank;
    for (const models::Block& b : stages[s]) {
      if (ours) {
        own.parameters.insert(own.parameters.end(), b.parameters.begin(), b.parameters.end());
        own.buffers.insert(own.buffers.end(), b.buffers.begin(), b.buffers.end());
        for (const auto& named : b.tied) {
          const bool listed = std::any_of(own.tied_copies.begin(), own.tied_copies.end(),
                                          [&](const auto& n) { return n.first == named.first; });
          if (!owned.count(named.first) && !listed) own.tied_copies.push_back(named);
        }
        continue;
      }
      for (const auto& [name, p] : b.parameters) {
        if (!kept.count(name)) p.set_data(at::empty({0}, p.options()));
      }
      for (const auto& [name, t] : b.buffers) t.set_data(at::empty({0}, t.options()));
    }
  }
  own.parameters.insert(own.parameters.end(), own.tied_copies.begin(), own.tied_copies.end());
  return own;
}

std::vector<double> peak_bytes_by_rank(comm::Communicator* comm) {
  const int world = comm ? comm->world() : 1;
  at::Tensor peaks = at::zeros({world}, at::kDouble);
  if (const CachingCpuAllocator* a = installed_caching_cpu_allocator()) {
    peaks[comm ? comm->rank() : 0] = static_cast<double>(a->stats().peak_bytes_in_use);
  }
  if (comm) comm->allreduce(peaks, comm::ReduceOp::kSum)->wait(comm->options().timeout);
  return std::vector<double>(peaks.data_ptr<double>(), peaks.data_ptr<double>() + world);
}

}  // namespace loom::parallel::pipeline
