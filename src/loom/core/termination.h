// SIGTERM as a request to stop, not an ending. Cloud providers send it before they take a spot
// machine away (about two minutes' notice), and `loom launch` passes it on to its ranks. A
// process that catches it finishes the step it is in, commits a checkpoint and exits with
// kPreemptedExitCode, which tells its launcher (or a person, or a job scheduler) that the run
// stopped on purpose and `--resume` continues it exactly.
//
// The flag is process-wide because signals are; catch_termination() is the one place that
// touches it, and the CLI decides whether a command installs it.
#pragma once

#include <atomic>

namespace loom {

// "Preempted, resumable": EX_TEMPFAIL of sysexits.h ("temporary failure, try again later").
constexpr int kPreemptedExitCode = 75;

// Installs a SIGTERM handler (idempotent) that records the signal instead of ending the process,
// and returns the flag it sets: 0 until the first SIGTERM arrives, then SIGTERM. Later SIGTERMs
// are absorbed: the process is already stopping. SIGINT (Ctrl-C) still ends it at once.
const std::atomic<int>& catch_termination();

}  // namespace loom
