#include "loom/train/run_parts.h"

#include <ATen/Context.h>
#include <ATen/DeviceAccelerator.h>
#include <ATen/Parallel.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <set>

#include "loom/core/blas_library.h"
#include "loom/core/caching_allocator.h"
#include "loom/core/error.h"
#include "loom/core/log.h"
#include "loom/data/remote/remote_batch_source.h"
#include "loom/models/lora.h"
#include "loom/parallel/model_state.h"
#include "loom/profile/flops.h"
#include "loom/train/optimizer.h"
#include "loom/train/pretrained.h"
#include "loom/train/summary.h"

namespace loom::train {

RunParts build_run_parts(const Config& config, const TrainOptions& options,
                         const LayoutFactory& layouts, int replica, int replicas, bool leader,
                         RunInfo& info) {
  const parallel::LayoutPlan& plan = layouts.plan().layout;
  use_configured_allocator(config.runtime.allocator, options.topology.memory_bytes);
  const DeviceChoice device = choose_device(config.runtime, options.local_rank);
  at::manual_seed(static_cast<uint64_t>(config.seed));
  RunParts parts;
  // Batches bound for a GPU are pinned, so that their copies run beside the step.
  parts.data = load_train_data(config, plan.step.micro_batch, options.topology.usable_cores,
                               replica, replicas, /*pin_memory=*/device.device.is_cuda());
  parts.data.train->set_epoch_limit(config.train.epochs);
  parts.model = models::make_model(config.model, parts.data.input);
  models::Model& model = *parts.model;
  // Whole on every rank, before the layout cuts it (a resume's checkpoint replaces it after).
  if (!config.model.pretrained.empty()) load_pretrained(config.model.pretrained, model);
  if (config.model.lora.rank > 0) {
    const std::vector<std::string> adapted = models::apply_lora(model, config.model.lora);
    if (leader) {
      LOOM_LOG(kInfo, "lora") << "rank-" << config.model.lora.rank << " adapters on "
                              << adapted.size() << " linears; the rest of the model is frozen";
    }
  }
  model.set_recompute_every(layouts.plan().recompute_every);
  info.runtime = choose_runtime(config.runtime, options.topology, model.is_convolutional(),
                                at::hasMKLDNN(), device);
  at::set_num_threads(info.runtime.threads);
  if (info.runtime.deterministic) use_deterministic_algorithms();
  // fp32 means fp32 on a GPU too: cuDNN's convolutions would otherwise take TF32 (10-bit
  // mantissas), as torch lets them by default; cuBLAS's products already do not.
  if (device.device.is_cuda() && info.runtime.precision == "fp32") {
    at::globalContext().setAllowTF32CuDNN(false);
  }
  if (const BlasLibrary blas = loaded_blas_library();
      blas.reference() && info.runtime.precision == "fp32" && leader) {
    LOOM_LOG(kWarn, "runtime") << "fp32 matrix products run on netlib's reference BLAS ("
                               << blas.path << "), 16-30x slower than OpenBLAS: install "
                               << kFastBlasPackage;
  }
  const auto format = info.runtime.memory_format == "channels_last" ? at::MemoryFormat::ChannelsLast
                                                                    : at::MemoryFormat::Contiguous;
  // The whole model goes to the device before a layout cuts, shards or hooks it: every tensor
  // made of it after (slices, buckets, optimizer state) is made there.
  model.to(device.device);
  // This rank's GPU is the process's current device from here on (torch.cuda.set_device): what
  // allocates or launches without naming a device (a raw allocation, a side stream) lands there.
  if (device.device.is_cuda())
    c10::impl::VirtualGuardImpl(device.device.type()).setDevice(device.device);
  model.set_memory_format(format);
  model.train(true);
  info.model = model.name();
  info.parameters = model.parameter_count();  // before a pipeline releases others' stages
  // What a tensor group splits of the whole model, before one does (for the advisor): at least 2
  // ranks, as its advice would split it.
  if (const models::TensorPlan tensor_plan = model.tensor_plan(); !tensor_plan.empty()) {
    const int64_t ranks = std::max(2, plan.tensor ? plan.tensor->ranks : 1);
    parts.tensor_splits_by = tensor_plan.splits_by();
    parts.tensor_split_share =
        static_cast<double>(models::planned_split_parameter_count(model, ranks)) /
        static_cast<double>(info.parameters);
  }
  parts.layout = layouts.make(model);
  // What this rank trains: the whole model, or its tensor group's slices of it.
  double trainable_bytes = 0;
  for (const auto& [name, p] : parts.layout->parameters()) {
    if (p.requires_grad()) trainable_bytes += static_cast<double>(p.numel() * p.element_size());
  }
  parallel::check_model_state_cap(config, plan, trainable_bytes);
  info.layout = plan.describe();
  info.pipeline_plan = parts.layout->plan_text();
  parts.optimizer = make_optimizer(config.optimizer, parts.layout->optimized_parameters());
  const models::Task task = parts.data.input.task;
  parts.loss = models::make_task_loss(task, config.train.label_smoothing);
  parts.eval_loss = models::make_task_loss(task);
  parts.feeder = std::make_unique<data::Feeder>(parts.data.stats, format, device.device);
  return parts;
}

int64_t RunParts::gradient_bytes() const {
  std::set<const void*> seen;
  int64_t bytes = 0;
  for (const auto* named : {&layout->parameters(), &layout->optimized_parameters()}) {
    for (const auto& [name, t] : *named) {
      const at::Tensor& g = t.grad();
      if (g.defined() && seen.insert(g.unsafeGetTensorImpl()).second) {
        bytes += static_cast<int64_t>(g.nbytes());
      }
    }
  }
  return bytes;
}

int64_t RunParts::optimizer_state_bytes(const std::string& name) const {
  int64_t bytes = 0;
  for (const auto& [key, t] :
       export_optimizer_state(*optimizer, name, layout->optimized_parameters())) {
    bytes += static_cast<int64_t>(t.nbytes());
  }
  return bytes;
}

void fill_parts_summary(const RunParts& parts, const RunInfo& info, const Config& config, int world,
                        double forward_flops_per_sample, const profile::StepTimes& steady,
                        TrainSummary& s) {
  const TrainData& data = parts.data;
  s.sample_bytes = s.tokens_per_sample > 0
                       ? 2 * s.tokens_per_sample * static_cast<int64_t>(sizeof(int64_t))
                       : data.input.channels * data.input.height * data.input.width;
  s.allocator = config.runtime.allocator;
  s.data = data.train->stats();
  s.loader_threads = data.loader_threads;
  s.remote_workers = data.train->worker_stats();
  s.remote_local_batches = data.train->local_batches();
  s.remote_receive_cpu_seconds = data.train->receive_cpu_seconds();
  s.layout = parts.layout->report();
  // Every worker's compute over the steady steps, compared by the advisor (data parallel).
  s.layout.worker_compute_seconds = parts.layout->by_trainer(steady[profile::Phase::kForward] +
                                                             steady[profile::Phase::kBackward] +
                                                             steady[profile::Phase::kOptimizer]);
  // The run's device memory, read before the calibration below allocates its own.
  const at::Device device = info.runtime.torch_device();
  if (!device.is_cpu()) {
    const auto stats = at::accelerator::getDeviceStats(device.index());
    constexpr size_t kAll = 0;  // the statistics' aggregate over pool kinds
    s.device_peak_allocated_bytes = stats.allocated_bytes[kAll].peak;
    s.device_peak_reserved_bytes = stats.reserved_bytes[kAll].peak;
  }
  // The products' type: bf16, fp16 or fp32 (runtime.precision).
  const at::ScalarType products = info.runtime.autocast_dtype();
  s.peak_dtype = info.runtime.precision;
  // Every rank calibrates its own device (its cores) at the same time; the job's peak is their
  // sum.
  const double rank_peak = profile::measure_peak_flops(products, 0.1, device);
  s.peak_flops_per_second = world * rank_peak;
  s.blas = loaded_blas_library();
  s.fp32_matmul_flops_per_second =
      products != at::kFloat ? profile::measure_peak_flops(at::kFloat, 0.1, device) : rank_peak;
  s.optimizer_state_bytes = parts.optimizer_state_bytes(config.optimizer.name);
  s.gradient_bytes = parts.gradient_bytes();
  s.parameter_bytes = parts.layout->parameter_bytes_between_steps();
  // A pipeline's ranks each counted their own stages' forward FLOPs.
  s.forward_flops_per_sample = parts.layout->sum_over_stages(forward_flops_per_sample);
  // Every rank holds the whole model's shape, whatever it trains of it.
  if (const double by_formula = parts.model->training_flops_per_sample(); by_formula > 0) {
    s.forward_flops_per_sample = by_formula / 3;
    s.flops_basis = parts.model->training_flops_basis();
  }
  if (const CachingCpuAllocator* a = installed_caching_cpu_allocator()) {
    const AllocatorStats stats = a->stats();
    s.peak_cached_bytes_in_use = stats.peak_bytes_in_use;
    s.allocator_hit_rate = stats.allocations ? double(stats.cache_hits) / stats.allocations : 0.0;
  }
  s.buckets = parts.layout->exchange_stats().buckets;
}

profile::RunProfile parts_profile(const RunParts& parts, const Config& config, const RunPlan& plan,
                                  const RunInfo& info, const TrainSummary& s) {
  const parallel::LayoutPlan& layout = plan.layout;
  profile::RunProfile p;
  p.compute_threads = info.runtime.threads;
  p.loader_threads = parts.data.loader_threads;
  p.loader_decodes = parts.data.decoded;
  p.precision = info.runtime.precision;
  p.memory_format = info.runtime.memory_format;
  p.device = info.runtime.device;
  p.native_bf16 = info.runtime.native_bf16;
  p.mfu = s.mfu();
  p.device_peak_reserved_bytes = static_cast<double>(s.device_peak_reserved_bytes);
  if (const at::Device device = info.runtime.torch_device(); !device.is_cpu()) {
    p.device_memory_bytes =
        static_cast<double>(at::accelerator::getMemoryInfo(device.index()).second);
  }
  p.convolutional = parts.model->is_convolutional();
  p.batch_size = layout.step.micro_batch;
  const data::BatchSource& train = *parts.data.train;
  const std::vector<data::RemoteWorkerStats> workers = train.worker_stats();
  p.loader_cpu_seconds_per_sample = local_cpu_seconds_per_sample(train.stats(), workers);
  // A worker's rate over the time it was up: one that died mid-run supplied nothing while
  // down, which says nothing of what a live one supplies.
  double delivered = 0, up_seconds = 0;
  for (const data::RemoteWorkerStats& w : workers) {
    if (w.samples == 0) continue;
    ++p.remote_workers;
    delivered += static_cast<double>(w.samples);
    up_seconds += w.up_seconds;
  }
  if (p.remote_workers > 0 && up_seconds > 0) {
    p.remote_worker_samples_per_second = delivered / up_seconds;
  }
  if (layout.pipeline) {
    p.pipeline_ranks = layout.pipeline->ranks;
    p.pipeline_microbatches = layout.step.micro_batches;
  }
  if (const CachingCpuAllocator* a = installed_caching_cpu_allocator()) {
    p.peak_tensor_bytes = static_cast<double>(a->stats().peak_bytes_in_use);
  }
  p.memory_cap_bytes =
      (layout.pipeline ? config.parallel.pipeline.memory_cap_mb : config.parallel.memory_cap_mb) *
      (1 << 20);
  for (const auto& [name, t] : parts.layout->parameters()) {
    p.parameter_bytes += static_cast<double>(t.nbytes());
  }
  p.recompute = plan.recompute_every > 0;  // as configured, or as the planner chose
  p.zero_stage = layout.data.zero_stage;
  p.accumulates_gradients = layout.step.micro_batches > 1;
  if (!layout.servers) {
    p.data_parallel_ranks = layout.data.replicas;
    for (int stage = 0; stage <= 3; ++stage) {
      p.model_state_bytes.push_back(
          p.parameter_bytes *
          parallel::model_state_per_parameter_byte(stage, p.data_parallel_ranks,
                                                   parallel::optimizer_states(config.optimizer),
                                                   p.accumulates_gradients));
    }
  }
  if (layout.tensor) p.tensor_ranks = layout.tensor->ranks;
  // Tensor groups split a model with a plan, not yet beside parameter servers.
  if (!layout.servers) {
    p.tensor_heads = parts.tensor_splits_by;
    p.tensor_split_share = parts.tensor_split_share;
  }
  p.optimizer_state_bytes = static_cast<double>(s.optimizer_state_bytes);
  p.worker_compute_seconds = s.layout.worker_compute_seconds;
  p.better_microbatches = s.layout.better_microbatches;
  p.better_bubble = s.layout.better_bubble;
  for (const parallel::ServerLoad& load : s.layout.servers) {
    p.server_busy_seconds.push_back(load.busy_seconds);
  }
  return p;
}

}  // namespace loom::train
