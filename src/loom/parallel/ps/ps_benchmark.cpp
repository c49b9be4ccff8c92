#include "loom/parallel/ps/ps_benchmark.h"

#include <ATen/ATen.h>

#include <chrono>
#include <numeric>

#include "loom/comm/make_communicator.h"
#include "loom/core/error.h"
#include "loom/core/median.h"
#include "loom/models/model.h"
#include "loom/parallel/bucket_plan.h"
#include "loom/parallel/ps/ps_bucket_exchange.h"
#include "loom/parallel/ps/ps_protocol.h"
#include "loom/parallel/ps/ps_server.h"
#include "loom/parallel/ps/server_window.h"

namespace loom::parallel::ps {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// The model's gradient buckets as DataParallel first builds them (reverse registration order,
// default limits), as zero-filled fp32 buffers.
std::vector<at::Tensor> gradient_buckets(const std::string& model_name) {
  ModelConfig config;
  config.name = model_name;
  models::InputSpec input{3, 224, 224, 1000};
  if (model_name == "mlp" || model_name == "cnn") input = {1, 28, 28, 10};
  const auto model = models::make_model(config, input);
  std::vector<GradientInfo> gradients;
  for (const auto& [name, t] : model->named_parameters()) {
    gradients.push_back({t.numel(), t.scalar_type()});
  }
  std::vector<int> order(gradients.size());
  std::iota(order.rbegin(), order.rend(), 0);
  std::vector<at::Tensor> buckets;
  for (const auto& bucket : plan_buckets(gradients, order, BucketLimits{})) {
    std::int64_t elements = 0;
    for (int p : bucket) elements += gradients[static_cast<size_t>(p)].numel;
    buckets.push_back(at::zeros({elements}, at::kFloat));
  }
  return buckets;
}

}  // namespace

PsBenchResult run_ps_benchmark(const std::shared_ptr<comm::Rendezvous>& rendezvous,
                               const PsBenchOptions& options) {
  PsBenchResult result;
  result.servers = options.servers;
  result.workers = rendezvous->world() - options.servers;
  if (result.workers < 1 || options.servers < 1) {
    throw ConfigError("bench ps: --servers " + std::to_string(options.servers) + " of " +
                      std::to_string(rendezvous->world()) + " ranks leaves no worker or server");
  }
  comm::CommOptions comm_options;
  comm_options.timeout = std::chrono::seconds(300);
  auto world = comm::make_communicator(options.backend, rendezvous, comm_options);
  const PsRoles roles{result.workers, options.servers};
  const std::int64_t job = job_hash(rendezvous->job());
  if (roles.is_server(rendezvous->rank())) {
    PsServerOptions server;
    server.roles = roles;
    server.job = job;
    run_server(*world, server);
    return result;
  }
  std::vector<int> worker_ranks(static_cast<size_t>(result.workers));
  std::iota(worker_ranks.begin(), worker_ranks.end(), 0);
  auto workers = comm::make_group_communicator(options.backend, rendezvous, worker_ranks,
                                               "bench-ps-workers", comm_options);
  std::vector<at::Tensor> buckets = gradient_buckets(options.model);
  for (const at::Tensor& b : buckets)
    result.gradient_bytes += static_cast<std::int64_t>(b.nbytes());
  result.buckets = static_cast<int>(buckets.size());

  PsExchangeOptions exchange_options;
  exchange_options.roles = roles;
  exchange_options.job = job;
  exchange_options.part_bytes = static_cast<std::int64_t>(options.part_mb * (1 << 20));
  SyncStats stats;
  {
    PsBucketExchange exchange(*world, exchange_options);
    exchange.buckets_changed(buckets);
    result.parts = static_cast<int>(exchange.plan().parts.size());
    const auto timeout = comm_options.timeout;
    // One warm-up step each (connections, first-touch of buffers), then the timed ones.
    for (int r = -1; r < options.repeats; ++r) {
      workers->barrier()->wait(timeout);
      auto begin = Clock::now();
      std::vector<comm::WorkPtr> works;
      for (const at::Tensor& b : buckets)
        works.push_back(workers->allreduce(b, comm::ReduceOp::kAvg));
      for (const comm::WorkPtr& w : works) w->wait(timeout);
      const double ring = seconds_since(begin);

      workers->barrier()->wait(timeout);
      begin = Clock::now();
      works.clear();
      for (size_t i = 0; i < buckets.size(); ++i) works.push_back(exchange.start(i, buckets[i]));
      for (const comm::WorkPtr& w : works) w->wait(timeout);
      exchange.step_finished(stats);
      result.server_loads = exchange.servers().totals();
      const double ps = seconds_since(begin);
      if (r < 0) continue;
      result.ring_steps.push_back(ring);
      result.ps_steps.push_back(ps);
    }
    exchange.end_training();
  }
  result.ring_seconds = upper_median(result.ring_steps);
  result.ps_seconds = upper_median(result.ps_steps);
  return result;
}

}  // namespace loom::parallel::ps
