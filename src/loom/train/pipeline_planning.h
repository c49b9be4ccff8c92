// train/'s part in planning a pipeline (parallel/pipeline/pipeline_plan.h): the model and the
// first batch that the planner profiles, made as a run makes them, from the data it loads and
// the runtime it chooses for this machine.
#pragma once

#include <cstdint>

#include "loom/core/config.h"
#include "loom/core/topology.h"
#include "loom/parallel/pipeline/pipeline_plan.h"

namespace loom::train {

// The configured model laid out as a run would lay it out (precision and memory format chosen,
// train mode), and the first training batch of `batch_size` as the model takes it (float,
// normalised). Seeds LibTorch with config.seed first, so every process builds the same initial
// values. `recompute_every`: every k-th block recomputes its activations in backward (0: none).
// Model and batch are on the device runtime.device gives local rank `local_rank`, as a run's
// (a GPU's blocks are timed there: their balance is not the CPU's).
parallel::pipeline::ModelOnBatch model_on_first_batch(const Config& config, int64_t batch_size,
                                                      const Topology& topology,
                                                      int64_t recompute_every, int local_rank = 0);

// model_on_first_batch of `config` on `topology` (both copied), as the planner asks for it.
parallel::pipeline::MakeModelOnBatch model_on_first_batch_of(const Config& config,
                                                             const Topology& topology,
                                                             int local_rank = 0);

}  // namespace loom::train
