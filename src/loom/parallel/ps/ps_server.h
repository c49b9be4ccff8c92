// A parameter server's loop (issue 16): one rank among [workers, workers + servers) that sums
// its share of every step's gradient parts until the workers say stop. It holds no state beyond
// the current step's parts, so a run's checkpoint (written by the workers) is all there is to
// save, and a restarted run may use any number of servers, or none.
//
// Each step: a header from every worker (ps_protocol.h), checked against the others' and the
// job's; the new share of the plan when it changed; then serve_parts(); then this server's
// running totals to worker rank 0. Every wait is bounded by the communicator's timeout and the
// error names the worker waited for.
//
// Threading: the caller's thread; the communicator's lanes receive from all workers at once.
#pragma once

#include <functional>

#include "loom/comm/communicator.h"
#include "loom/parallel/ps/server_load.h"
#include "loom/parallel/ps/ps_exchange.h"

namespace loom::parallel::ps {

struct PsServerOptions {
  PsRoles roles;
  std::int64_t job = 0;  // job_hash() of the run
  // After every step, with the totals so far (e.g. to log them now and then).
  std::function<void(const ServerLoad&)> on_step;
  ServerHooks hooks;
};

// Serves until every worker has sent stop; returns the totals. Throws Error (or TimeoutError)
// naming the worker that sent something wrong or nothing.
ServerLoad run_server(comm::Communicator& world, const PsServerOptions& options);

}  // namespace loom::parallel::ps
