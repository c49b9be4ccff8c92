#include "loom/train/data_parallel_run.h"

#include <algorithm>

#include "loom/core/error.h"
#include "loom/parallel/data_parallel.h"
#include "loom/parallel/local_grad_sync.h"

namespace loom::train {

Config config_for_rank(Config config, int world) {
  if (config.data.global_batch > 0) {
    if (config.data.global_batch % world != 0) {
      throw ConfigError(
          "config key 'data.global_batch': " + std::to_string(config.data.global_batch) +
          " samples do not divide evenly over " + std::to_string(world) + " ranks");
    }
    config.data.batch_size = config.data.global_batch / world;
  }
  if (config.optimizer.lr_scaling == "linear") {
    config.optimizer.lr *= world;
    config.schedule.min_lr *= world;
  }
  return config;
}

parallel::BucketLimits bucket_limits(double first_mb, double cap_mb) {
  return {static_cast<std::size_t>(first_mb * (1 << 20)),
          static_cast<std::size_t>(cap_mb * (1 << 20))};
}

std::unique_ptr<parallel::GradSync> make_grad_sync(models::NamedTensors parameters,
                                                   models::NamedTensors buffers,
                                                   comm::Communicator* communicator,
                                                   const ParallelConfig& config,
                                                   comm::Communicator* ps_world,
                                                   const parallel::ps::PsExchangeOptions& ps) {
  if (!ps_world && (!communicator || communicator->world() == 1)) {
    return std::make_unique<parallel::LocalGradSync>(std::move(parameters));
  }
  parallel::DataParallelOptions options;
  options.buckets = bucket_limits(config.first_bucket_mb, config.bucket_cap_mb);
  options.find_unused_parameters = config.find_unused_parameters;
  options.broadcast_buffers = config.broadcast_buffers;
  if (config.compression == "bf16") options.compression = at::kBFloat16;
  if (config.compression == "fp16") options.compression = at::kHalf;
  std::unique_ptr<parallel::BucketExchange> exchange;
  if (ps_world) {
    parallel::ps::PsExchangeOptions servers = ps;
    servers.part_bytes =
        std::max<std::int64_t>(1, static_cast<std::int64_t>(config.ps.part_mb * (1 << 20)));
    exchange = std::make_unique<parallel::ps::PsBucketExchange>(*ps_world, servers);
  }
  return std::make_unique<parallel::DataParallel>(std::move(parameters), std::move(buffers),
                                                  *communicator, options, std::move(exchange));
}

}  // namespace loom::train
