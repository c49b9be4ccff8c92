// How `loom train` and `loom ps-server` enter their job (train/job.h joins it and serves), and
// what a parameter-server rank of either prints when its workers are done.
#pragma once

#include <string>

#include "loom/parallel/grad_sync.h"
#include "loom/train/job.h"

namespace loom::cli {

// train::enter_job for a command: a serving rank stopped by a signal says it was serving.
train::JobEntry enter_job_of_command(const Config& config, const comm::WorldInfo& world,
                                     const std::string& out_dir);

// Prints the server's totals; returns the exit code (0).
int report_serving(const train::Job& job, const parallel::ServerLoad& load);

}  // namespace loom::cli
