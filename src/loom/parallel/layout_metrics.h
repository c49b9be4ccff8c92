// What one piece of a parallel layout (an exchange, a dimension) adds to a run's metrics beside
// the loop's own step accounting: fields of metrics.jsonl's step record at a log line, rows of its
// own after it, and its part of the run's report. The piece keeps its counts as it works; the
// run's accounting (train/run_accounting.h) takes the pieces at each log line, from the layout
// (`loom train`) or from the exchange a script's Steps watches, and never asks which they are.
// Parameter servers' load and staleness are one such piece (ps/server_window.h); a new dimension
// reports its collectives the same way.
//
// Threading: the training thread only.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "loom/parallel/layout_report.h"

namespace loom::parallel {

class LayoutMetrics {
 public:
  virtual ~LayoutMetrics() = default;

  // At a log line: fields for the window's step record (`step_record`), and records of the
  // piece's own appended to `records`, covering the steps since the last call. Called on every
  // training rank; rank 0's are written.
  virtual void close_window(int64_t step, nlohmann::ordered_json& step_record,
                            std::vector<nlohmann::ordered_json>& records) = 0;
  // Its part of the run's report.
  virtual void fill(LayoutReport& report) const {}
};

}  // namespace loom::parallel
