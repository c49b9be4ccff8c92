#include "loom/parallel/ps/server_window.h"

#include <algorithm>

namespace loom::parallel::ps {

void ServerWindow::pulled(std::int64_t staleness) {
  last_staleness_ = staleness;
  window_staleness_ = std::max(window_staleness_, staleness);
}

void ServerWindow::close_window(int64_t step, nlohmann::ordered_json& step_record,
                                std::vector<nlohmann::ordered_json>& records) {
  if (window_staleness_ >= 0) step_record["staleness"] = window_staleness_;
  window_staleness_ = -1;
  const auto now = Clock::now();
  const double seconds = std::chrono::duration<double>(now - window_start_time_).count();
  window_start_time_ = now;
  if (totals_.empty()) return;  // not worker 0, or no step yet
  window_start_.resize(totals_.size());
  const double per_second = seconds > 0 ? 1 / seconds : 0;
  nlohmann::ordered_json servers = nlohmann::ordered_json::array();
  for (size_t i = 0; i < totals_.size(); ++i) {
    const ServerLoad& now_load = totals_[i];
    const ServerLoad& before = window_start_[i];
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
  window_start_ = totals_;
  records.push_back(
      {{"type", "parameter_servers"}, {"step", step}, {"seconds", seconds}, {"servers", servers}});
}

void ServerWindow::fill(LayoutReport& report) const {
  report.servers = totals_;
  report.server_hosts = hosts_;
  report.largest_part_bytes = largest_part_bytes_;
}

}  // namespace loom::parallel::ps
