// summary.json: the run's outcome and the choices that produced it.
#pragma once

#include <string>

#include "loom/core/topology.h"
#include "loom/train/trainer.h"

namespace loom::train {

void write_summary(const std::string& path, const TrainSummary& summary, const Topology& topology);

}  // namespace loom::train
