#include "loom/train/remote_worker_metrics.h"

namespace loom::train {

RemoteWorkerMetrics::RemoteWorkerMetrics(const data::BatchSource& source)
    : source_(source),
      last_(source.worker_stats()),
      last_local_(source.local_batches()),
      last_time_(Clock::now()) {}

nlohmann::ordered_json RemoteWorkerMetrics::window_record(int64_t step) {
  const auto now = Clock::now();
  const double seconds = std::chrono::duration<double>(now - last_time_).count();
  const std::vector<data::RemoteWorkerStats> current = source_.worker_stats();
  const int64_t local = source_.local_batches();
  auto per_second = [&](double n) { return seconds > 0 ? n / seconds : 0.0; };
  nlohmann::ordered_json workers = nlohmann::ordered_json::array();
  for (size_t i = 0; i < current.size(); ++i) {
    const data::RemoteWorkerStats& now_w = current[i];
    const data::RemoteWorkerStats before = i < last_.size() ? last_[i] : data::RemoteWorkerStats{};
    const int64_t batches = now_w.batches - before.batches;
    const double latency = now_w.request_seconds - before.request_seconds;
    workers.push_back(
        {{"address", now_w.address},
         {"state", now_w.state},
         {"batches", batches},
         {"batches_per_second", per_second(static_cast<double>(batches))},
         {"samples_per_second", per_second(static_cast<double>(now_w.samples - before.samples))},
         {"bytes_per_second", per_second(static_cast<double>(now_w.bytes - before.bytes))},
         {"mean_latency_s", batches > 0 ? latency / static_cast<double>(batches) : 0.0},
         {"failures", now_w.failures - before.failures},
         {"crc_mismatches", now_w.crc_mismatches - before.crc_mismatches}});
  }
  nlohmann::ordered_json record = {{"type", "data_workers"},
                                   {"step", step},
                                   {"seconds", seconds},
                                   {"workers", workers},
                                   {"local_batches", local - last_local_}};
  last_ = current;
  last_local_ = local;
  last_time_ = now;
  return record;
}

}  // namespace loom::train
