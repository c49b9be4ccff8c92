#include "loom/profile/exchange_planner.h"

#include <algorithm>
#include <cstdio>

#include "loom/core/error.h"

namespace loom::profile {

ExchangePlan plan_exchange(double gradient_bytes, int workers, double link_bytes_per_second,
                           const std::vector<int>& server_counts) {
  if (gradient_bytes <= 0) throw ConfigError("plan: the run exchanged no gradient bytes");
  if (workers < 1) throw ConfigError("--workers: must be at least 1");
  if (link_bytes_per_second <= 0) throw ConfigError("--link-gbit: must be positive");
  ExchangePlan plan;
  plan.gradient_bytes = gradient_bytes;
  plan.workers = workers;
  plan.link_bytes_per_second = link_bytes_per_second;
  const double n = workers, m = gradient_bytes, b = link_bytes_per_second;
  const double transfer = m / b;  // M/B: one gradient's worth over one link
  plan.ring_seconds = 2 * (n - 1) / n * transfer;
  char text[160];
  std::snprintf(text, sizeof text, "2(n-1)/n*M/B = 2*%d/%d*%.4g = %.4g s", workers - 1, workers,
                transfer, plan.ring_seconds);
  plan.ring_arithmetic = text;
  plan.break_even_servers = workers > 1 ? n * n / (2 * (n - 1)) : 0;
  double best = plan.ring_seconds;
  for (int k : server_counts) {
    if (k < 1) throw ConfigError("--servers: counts must be at least 1");
    const double through_servers = n * transfer / k;
    ServerOption option{k, std::max(transfer, through_servers), ""};
    std::snprintf(text, sizeof text, "max(M/B, n*M/(k*B)) = max(%.4g, %d*%.4g/%d) = %.4g s",
                  transfer, workers, transfer, k, option.seconds);
    option.arithmetic = text;
    if (option.seconds < best * (1 - 1e-9)) best = option.seconds, plan.best_servers = k;
    plan.options.push_back(option);
  }
  return plan;
}

}  // namespace loom::profile
