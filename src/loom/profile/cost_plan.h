// What `loom plan --prices` (and the Python package's `loom.plan`) compute from a profiled run:
// the run's measurement, read from its summary.json, each instance type's estimated throughput
// and cost, and the CPU-preprocessing what-if (see cost_planner.h for the arithmetic).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "loom/profile/cost_planner.h"

namespace loom::profile {

// The planner's inputs from a `loom train` summary.json's text; `origin` names it in messages.
// Throws ConfigError when it is not a Loom run summary or measured no throughput.
RunMeasurement measurement_from_summary(const std::string& summary_json, const std::string& origin);

struct CostPlan {
  RunMeasurement run;
  std::vector<InstanceEstimate> instances;
  // The what-if's instance types, given or picked: the first accelerator instance with a
  // measured rate (else the first with any estimate) trains; the CPU-only instance with the
  // most vCPUs per dollar preprocesses. "" (and no what_if) when the list has none that fits.
  std::string trainer, worker;
  std::optional<WhatIf> what_if;
};

// Throws ConfigError when `trainer` or `worker` is named but not in the list.
CostPlan plan_costs(const RunMeasurement& run, const std::vector<InstanceType>& prices,
                    std::string trainer = "", std::string worker = "");

}  // namespace loom::profile
