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
};

// Throws DataError naming what differs when `now` would not continue `saved`'s sequence.
void check_same_sequence(const LoaderState& saved, const LoaderState& now,
                         const std::string& checkpoint);

}  // namespace loom::data
