#include "loom/train/data_parallel_run.h"

#include <algorithm>

#include "loom/core/error.h"
#include "loom/parallel/data_parallel.h"
#include "loom/parallel/local_grad_sync.h"
#include "loom/parallel/ps/remote_parameters.h"
#include "loom/train/server_optimizer.h"

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

namespace {

std::int64_t part_bytes(const PsConfig& config) {
  return std::max<std::int64_t>(1, static_cast<std::int64_t>(config.part_mb * (1 << 20)));
}

}  // namespace

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
    servers.part_bytes = part_bytes(config.ps);
    exchange = std::make_unique<parallel::ps::PsBucketExchange>(*ps_world, servers);
  }
  return std::make_unique<parallel::DataParallel>(std::move(parameters), std::move(buffers),
                                                  *communicator, options, std::move(exchange));
}

bool servers_hold_parameters(const PsConfig& config) {
  return config.mode != "sync" || config.optimizer_on == "server";
}

std::unique_ptr<parallel::GradSync> make_remote_parameters(
    models::NamedTensors parameters, models::NamedTensors buffers, comm::Communicator& communicator,
    const Config& config, comm::Communicator& ps_world, const parallel::ps::PsExchangeOptions& ps,
    std::int64_t first_step, std::optional<parallel::HeldOptimizerState> state) {
  parallel::ps::RemoteParametersOptions options;
  options.roles = ps.roles;
  options.job = ps.job;
  options.server_hosts = ps.server_hosts;
  options.part_bytes = part_bytes(config.parallel.ps);
  options.mode = config.parallel.ps.mode;
  // Sync with the optimizer on the servers is SSP with no slack.
  options.staleness = config.parallel.ps.mode == "ssp" ? config.parallel.ps.staleness : 0;
  options.optimizer_on_server = config.parallel.ps.optimizer_on == "server";
  options.state_fields = options.optimizer_on_server
                             ? static_cast<int>(held_state_fields(config.optimizer).size())
                             : 0;
  options.first_step = first_step;
  if (options.optimizer_on_server) options.state = std::move(state);
  return std::make_unique<parallel::ps::RemoteParameters>(
      std::move(parameters), std::move(buffers), communicator, ps_world, std::move(options));
}

}  // namespace loom::train
