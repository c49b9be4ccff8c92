#include "loom/train/server_metrics.h"

namespace loom::train {

nlohmann::ordered_json ServerMetrics::window_record(
    int64_t step, const std::vector<parallel::ServerLoad>& totals) {
  const auto now = Clock::now();
  const double seconds = std::chrono::duration<double>(now - last_time_).count();
  last_time_ = now;
  last_.resize(totals.size());
  nlohmann::ordered_json servers = nlohmann::ordered_json::array();
  for (size_t i = 0; i < totals.size(); ++i) {
    const parallel::ServerLoad& now_load = totals[i];
    const parallel::ServerLoad& before = last_[i];
    const double per_second = seconds > 0 ? 1 / seconds : 0;
    servers.push_back({{"server", i},
                       {"steps", now_load.steps - before.steps},
                       {"bytes_in_per_second",
                        static_cast<double>(now_load.bytes_in - before.bytes_in) * per_second},
                       {"bytes_out_per_second",
                        static_cast<double>(now_load.bytes_out - before.bytes_out) * per_second},
                       {"active", (now_load.active_seconds - before.active_seconds) * per_second},
                       {"busy", (now_load.busy_seconds - before.busy_seconds) * per_second},
                       {"summing", (now_load.sum_seconds - before.sum_seconds) * per_second},
                       {"max_staleness", now_load.max_staleness}});
  }
  last_ = totals;
  return {
      {"type", "parameter_servers"}, {"step", step}, {"seconds", seconds}, {"servers", servers}};
}

}  // namespace loom::train
