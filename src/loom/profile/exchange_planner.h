// Ring all-reduce or parameter servers for a cluster's gradient exchange, by the bandwidth
// arithmetic of BytePS (OSDI'20), with the arithmetic kept as text so `loom plan` can show it.
//
// For M gradient bytes per step, n workers and links of B bytes/s per host: the ring moves
// 2(n−1)/n·M through every worker's link, so it takes 2(n−1)/n·M/B; with k servers each worker
// moves M each way and each server n·M/k, so it takes max(M/B, n·M/(k·B)). Servers win once
// k > n²/(2(n−1)). Compute, latency and overlap with backward are left out: it compares the
// exchanges, not whole steps.
#pragma once

#include <string>
#include <vector>

namespace loom::profile {

struct ServerOption {
  int servers = 0;
  double seconds = 0;
  std::string arithmetic;  // "max(M/B, n*M/(k*B)) = max(0.374, 0.374) = 0.374 s"
};

struct ExchangePlan {
  double gradient_bytes = 0;         // M
  int workers = 0;                   // n
  double link_bytes_per_second = 0;  // B
  double ring_seconds = 0;
  std::string ring_arithmetic;
  std::vector<ServerOption> options;  // in the order asked
  double break_even_servers = 0;      // n²/(2(n−1)): more servers than this beat the ring
  int best_servers = 0;               // the fastest option's k; 0 when the ring is fastest
};

// Throws ConfigError for non-positive bytes, bandwidth, workers or server counts.
ExchangePlan plan_exchange(double gradient_bytes, int workers, double link_bytes_per_second,
                           const std::vector<int>& server_counts);

}  // namespace loom::profile
