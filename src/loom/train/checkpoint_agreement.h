// After a checkpoint that some ranks of a job write (a script's loom.checkpoint.save: rank 0, or
// a pipeline's first rank): every rank learns whether it was committed, as torch DCP's save
// returns on every rank once the checkpoint is whole. Without it the ranks that do not write
// return at once, and a load on them right after finds no committed checkpoint.
#pragma once

#include <cstdint>

#include "loom/comm/communicator.h"

namespace loom::train {

// Collective over `comm`: every rank calls it after its part of the checkpoint of `step`,
// `failed_here` when its own part failed (its caller then raises its own error). Returns once
// every rank has called it; throws Error on a rank whose part did not fail when another rank's
// did, naming how many failed. Waits at most the communicator's timeout (TimeoutError).
void agree_on_checkpoint(comm::Communicator& comm, int64_t step, bool failed_here);

}  // namespace loom::train
