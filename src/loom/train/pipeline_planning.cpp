#include "loom/train/pipeline_planning.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "loom/core/caching_allocator.h"
#include "loom/data/feeder.h"
#include "loom/models/model.h"
#include "loom/train/runtime_choice.h"
#include "loom/train/train_data.h"

namespace loom::train {

parallel::pipeline::ModelOnBatch model_on_first_batch(const Config& config, int64_t batch_size,
                                                      const Topology& topology,
                                                      int64_t recompute_every, int local_rank) {
  // The device first: a question about CUDA must come before ATen's first (seeding asks it).
  const DeviceChoice device = choose_device(config.runtime, local_rank);
  at::manual_seed(static_cast<uint64_t>(config.seed));
  const CachingCpuAllocator* allocator = installed_caching_cpu_allocator();
  const size_t before = allocator ? allocator->stats().bytes_in_use : 0;
  TrainData data = load_train_data(config, batch_size, topology.usable_cores);
  parallel::pipeline::ModelOnBatch out;
  out.model = models::make_model(config.model, data.input);
  out.model->set_recompute_every(recompute_every);
  const RuntimeChoice runtime = choose_runtime(
      config.runtime, topology, out.model->is_convolutional(), at::hasMKLDNN(), device);
  out.autocast = runtime.autocast_dtype();
  const auto format = runtime.memory_format == "channels_last" ? at::MemoryFormat::ChannelsLast
                                                               : at::MemoryFormat::Contiguous;
  out.model->set_memory_format(format);
  out.model->train(true);
  out.model->to(device.device);
  out.device = device.device;
  const data::Batch batch = data.train->batch(0, 0);
  const data::Feeder feeder(data.stats, format, device.device);
  out.input = feeder.to_input(batch.inputs);
  out.targets = feeder.to_device(batch.targets);
  out.task = data.input.task;
  // The data lives in host memory: on a GPU it takes nothing of the memory the plan divides.
  if (allocator && device.device.is_cpu()) {
    double model_bytes = 0;
    for (const auto& [name, t] : out.model->named_parameters()) model_bytes += t.nbytes();
    for (const auto& [name, t] : out.model->named_buffers()) model_bytes += t.nbytes();
    out.data_bytes = std::max(0.0, static_cast<double>(allocator->stats().bytes_in_use) -
                                       static_cast<double>(before) - model_bytes);
  }
  return out;
}

parallel::pipeline::MakeModelOnBatch model_on_first_batch_of(const Config& config,
                                                             const Topology& topology,
                                                             int local_rank) {
  return [config, topology, local_rank](int64_t batch_size, int64_t recompute_every) {
    return model_on_first_batch(config, batch_size, topology, recompute_every, local_rank);
  };
}

}  // namespace loom::train
