// Random valid pipeline schedules, for property tests: every computation of a step is put in
// one random order that respects what each needs (F after the previous stage's F of its
// micro-batch; B or I after the next stage's B or I, or after its own F on the last stage; W
// after its I), and each rank's list is its share of that order. Any schedule that can run
// without deadlock comes out of some such order, and every one that comes out can.
#pragma once

#include <cstdint>

#include "loom/parallel/pipeline/schedule.h"

namespace loom::test {

struct RandomScheduleOptions {
  int ranks = 2;
  int chunks = 1;  // stages per rank, looped: stage s on rank s % ranks
  int microbatches = 2;
  // Each (stage, micro-batch) gets I and W with probability 3/4, else B; false: B only.
  bool split_backward = false;
};

// Compute actions only, then add_communication(), as a compute-only CSV file would load; the
// same seed gives the same schedule on every rank. Named "random-<seed>".
parallel::pipeline::Schedule random_schedule(uint64_t seed, const RandomScheduleOptions& options);

}  // namespace loom::test
