// The parameter servers' rows of metrics.jsonl: at every log line, what each server did since
// the previous one (bytes in and out per second, share of the time it was active or summing), as
// worker rank 0 last heard from it, so a server that falls behind shows in the run's history.
//
// Threading: called from the training thread only.
#pragma once

#include <chrono>
#include <nlohmann/json.hpp>
#include <vector>

#include "loom/parallel/grad_sync.h"

namespace loom::train {

class ServerMetrics {
 public:
  ServerMetrics() : last_time_(Clock::now()) {}

  // {"type": "parameter_servers", "step", "seconds", "servers": [...]} from the servers' running
  // totals, over the time since the previous call.
  nlohmann::ordered_json window_record(int64_t step,
                                       const std::vector<parallel::ServerLoad>& totals);

 private:
  using Clock = std::chrono::steady_clock;
  std::vector<parallel::ServerLoad> last_;
  Clock::time_point last_time_;
};

}  // namespace loom::train
