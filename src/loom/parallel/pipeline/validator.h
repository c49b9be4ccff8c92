// Checks a schedule before it runs, rule by rule, and fails with the first broken one:
//   - every action names an existing stage and micro-batch, on the rank that holds the stage
//     (each stage on one rank);
//   - each micro-batch runs F once per stage, then either B once or I once and W once, with F
//     before B/I and I before W;
//   - a computation whose input comes from another rank receives it first, a result another rank
//     needs is sent after it is computed, and every send has its receive and the reverse;
//   - between two ranks, receives come in the order of the sends (the Communicator pairs them
//     in call order);
//   - a dry run finishes: no rank waits forever (deadlock).
#pragma once

#include "loom/parallel/pipeline/schedule.h"

namespace loom::parallel::pipeline {

// Throws ConfigError: "pipeline schedule '<name>': rank R, action I (<action>): <rule>".
void validate(const Schedule& schedule);

}  // namespace loom::parallel::pipeline
