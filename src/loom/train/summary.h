// summary.json: the run's outcome and the choices that produced it.
#pragma once

#include <string>

#include "loom/core/topology.h"
#include "loom/train/trainer.h"

namespace loom::train {

void write_summary(const std::string& path, const TrainSummary& summary, const Topology& topology);

// What building a sample cost this host's loader threads (CPU seconds): samples remote workers
// delivered are not counted, since their build time is their own host's.
double local_cpu_seconds_per_sample(const data::LoaderStats& data,
                                    const std::vector<data::RemoteWorkerStats>& workers);

}  // namespace loom::train
