// The parameter servers as a run's metrics see them (a LayoutMetrics piece of the layouts that
// have servers): each server's running totals as worker rank 0 hears them after every step, and,
// where the servers hold the parameters, how many steps of the slowest worker this rank's pulled
// parameters lacked. At each log line the step record gets the window's largest staleness and a
// {"type": "parameter_servers"} row says what each server did since the last (bytes in and out
// per second, the share of the time it was active, busy or summing), so a server that falls
// behind shows in the run's history; the report gets the totals, hosts and the largest part.
//
// Threading: the training thread only (the exchange that owns it).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "loom/parallel/layout_metrics.h"
#include "loom/parallel/ps/server_load.h"

namespace loom::parallel::ps {

class ServerWindow : public LayoutMetrics {
 public:
  // `hosts`: the servers', in order (may be empty).
  explicit ServerWindow(std::vector<std::string> hosts) : hosts_(std::move(hosts)) {}

  // Worker rank 0, after each step: every server's totals so far.
  void heard(std::vector<ServerLoad> totals) { totals_ = std::move(totals); }
  // After each pull of the servers' parameters: steps of the slowest worker they lacked.
  void pulled(std::int64_t staleness);
  // The unit of their balance: the part plan's largest part, set whenever the plan is made.
  void set_largest_part_bytes(std::int64_t bytes) { largest_part_bytes_ = bytes; }

  const std::vector<ServerLoad>& totals() const { return totals_; }
  // The last pull's staleness; -1 before any (or where parameters are not pulled).
  std::int64_t last_staleness() const { return last_staleness_; }

  void close_window(int64_t step, nlohmann::ordered_json& step_record,
                    std::vector<nlohmann::ordered_json>& records) override;
  void fill(LayoutReport& report) const override;

 private:
  using Clock = std::chrono::steady_clock;
  std::vector<std::string> hosts_;
  std::int64_t largest_part_bytes_ = 0;
  std::vector<ServerLoad> totals_;
  std::int64_t last_staleness_ = -1;
  std::int64_t window_staleness_ = -1;    // the most a pulled parameter lagged; -1: none pulled
  std::vector<ServerLoad> window_start_;  // the totals at the last log line
  Clock::time_point window_start_time_ = Clock::now();
};

}  // namespace loom::parallel::ps
