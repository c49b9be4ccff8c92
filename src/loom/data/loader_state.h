// Where a batch source stands, as saved in checkpoints: the next batch, and everything that
// fixes the sequence of batches (seed, data set size, this rank's shard, batches per epoch).
// Batches are pure functions of (epoch, step), so a resume that checks the identity and seeks to
// the position sees exactly the samples an uninterrupted run would have seen.
#pragma once

#include <cstdint>
#include <string>

namespace loom::data {

struct LoaderState {
  int64_t epoch = 0, step = 0;  // the next batch (micro-batch) to read
  uint64_t seed = 0;
  int64_t samples = 0;          // in the data set
  int64_t steps_per_epoch = 0;  // this rank's
  int rank = 0, world = 1;
  int64_t batch = 0;  // samples per batch on each rank; 0: unknown (older checkpoints)
};

// Throws DataError naming what differs when `now` would not continue `saved`'s sequence. The
// number of ranks may change when the global batch (ranks x batch) does not: every rank takes
// positions rank, rank + world, ... of the epoch's order, so the ranks' batches of step s cover
// positions [s x global batch, (s + 1) x global batch) whatever their number, and a job that
// goes on with fewer ranks trains on the same samples at every step.
void check_same_sequence(const LoaderState& saved, const LoaderState& now,
                         const std::string& checkpoint);

}  // namespace loom::data
