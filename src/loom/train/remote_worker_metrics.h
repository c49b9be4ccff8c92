// The remote data workers' rows of metrics.jsonl: at every log line, what each worker delivered
// since the previous one (batches, samples and bytes per second, mean request latency, failures),
// so a worker that slows down or drops out shows in the run's history, not only in its summary.
//
// Threading: called from the training thread only.
#pragma once

#include <chrono>
#include <nlohmann/json.hpp>
#include <vector>

#include "loom/data/batch_source.h"

namespace loom::train {

class RemoteWorkerMetrics {
 public:
  // `source` is fed by remote data workers.
  explicit RemoteWorkerMetrics(const data::BatchSource& source);

  // {"type": "data_workers", "step", "seconds", "workers": [...], "local_batches"}, over the
  // time since the previous call (or since construction).
  nlohmann::ordered_json window_record(int64_t step);

 private:
  using Clock = std::chrono::steady_clock;
  const data::BatchSource& source_;
  std::vector<data::RemoteWorkerStats> last_;
  int64_t last_local_ = 0;
  Clock::time_point last_time_;
};

}  // namespace loom::train
