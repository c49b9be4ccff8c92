// What a parameter-server rank of `loom train` or `loom ps-server` prints when its workers are
// done (train/job.h sets the job up and serves).
#pragma once

#include "loom/parallel/grad_sync.h"
#include "loom/train/job.h"

namespace loom::cli {

// Prints the server's totals; returns the exit code (0).
int report_serving(const train::Job& job, const parallel::ServerLoad& load);

}  // namespace loom::cli
