#include "loom/cli/ps_job.h"

#include <cstdio>

#include "loom/cli/stop_signals.h"

namespace loom::cli {

train::JobEntry enter_job_of_command(const Config& config, const comm::WorldInfo& world,
                                     const std::string& out_dir) {
  train::JobEntryOptions options;
  options.out_dir = out_dir;
  options.before_serving = [] { set_stop_activity("serving"); };
  return train::enter_job(config, world, options);
}

int report_serving(const train::Job& job, const parallel::ServerLoad& load) {
  const parallel::LayoutPlan& plan = job.plan;
  std::printf(
      "loom ps-server: server %d (rank %d of %d) served %lld steps of %d workers: %.1f MB in, "
      "%.1f MB out, %.2f s summing, %.2f s active, %.2f s busy (CPU)\n",
      plan.rank - plan.trainers, plan.rank, plan.world, static_cast<long long>(load.steps),
      plan.trainers, static_cast<double>(load.bytes_in) / 1e6,
      static_cast<double>(load.bytes_out) / 1e6, load.sum_seconds, load.active_seconds,
      load.busy_seconds);
  return 0;
}

}  // namespace loom::cli
