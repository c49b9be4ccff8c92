// What changes when `loom train` runs as one rank of several: the per-rank configuration and
// the gradient sync around the model.
#pragma once

#include <memory>
#include <optional>

#include "loom/comm/communicator.h"
#include "loom/core/config.h"
#include "loom/models/model.h"
#include "loom/parallel/grad_sync.h"
#include "loom/parallel/ps/ps_bucket_exchange.h"

namespace loom::train {

// The configuration one of `world` ranks runs: the per-rank batch derived from
// data.global_batch, and optimizer.lr scaled by optimizer.lr_scaling. Throws ConfigError naming
// the key when the global batch does not divide over the ranks.
Config config_for_rank(Config config, int world);

// Bucket limits given in MiB (parallel.first_bucket_mb, parallel.bucket_cap_mb).
parallel::BucketLimits bucket_limits(double first_mb, double cap_mb);

// The gradient sync of a run: local for one process (`communicator` null or of one rank), else
// DataParallel over these parameters and buffers (the model's, or a pipeline stage's), as
// parallel.* configures it. With `ps_world` (parallel.mode: ps) DataParallel's buckets go to the
// parameter servers `ps` names, also for a single worker.
std::unique_ptr<parallel::GradSync> make_grad_sync(models::NamedTensors parameters,
                                                   models::NamedTensors buffers,
                                                   comm::Communicator* communicator,
                                                   const ParallelConfig& config,
                                                   comm::Communicator* ps_world = nullptr,
                                                   const parallel::ps::PsExchangeOptions& ps = {});

// Whether the servers keep the parameters (async or SSP, or the optimizer on the servers) rather
// than only summing gradients (sync with the optimizer on the workers).
bool servers_hold_parameters(const PsConfig& config);

// The worker's side when servers_hold_parameters(): they receive worker 0's parameters (and,
// with the optimizer on the servers, `state`: a resumed run's optimizer state) and serve from
// step `first_step` on. `communicator` holds the workers, `ps_world` the whole job.
std::unique_ptr<parallel::GradSync> make_remote_parameters(
    models::NamedTensors parameters, models::NamedTensors buffers, comm::Communicator& communicator,
    const Config& config, comm::Communicator& ps_world, const parallel::ps::PsExchangeOptions& ps,
    std::int64_t first_step, std::optional<parallel::HeldOptimizerState> state);

}  // namespace loom::train
