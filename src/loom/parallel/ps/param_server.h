// A parameter server that holds its share of the parameters (issue 16): the asynchronous and
// bounded-staleness modes, and the optimizer on the servers. The synchronous summation server
// (ps_server.h) keeps nothing between steps; this one keeps the parameters, and with
// optimizer_on: server the optimizer state, and answers each worker on its own.
//
// The parameters are the flat layout of the model (flat_layout.h) cut into parts (part_plan.h);
// this server keeps the parts the plan gives it. Worker 0's init brings their first values (and
// the optimizer state of a resumed run). Then every worker, at its own pace, pushes a step's
// gradients or parameter deltas and receives the parameters to train its next step on:
//
//   async      Each push is applied when it arrives, as 1/workers of a step (the gradient at
//              lr / workers, or the delta times 1 / workers), and answered at once.
//   ssp (s)    A step is applied once every worker has pushed it: the mean of the pushes, summed
//              in worker order, in step order. A worker that pushed step k gets its answer once
//              steps up to k - s are applied, so no worker runs more than s steps ahead of the
//              slowest. s = 0 is synchronous training with the update made on the server.
//
// Requests and answers are in ps_protocol.h. The loop polls each worker's next request, so a
// slow worker holds up only what SSP says it must. Every wait is bounded by the communicator's
// timeout; a worker that sends nothing for that long, or whose connection fails, is named in the
// error.
//
// Threading: the caller's thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "loom/comm/communicator.h"
#include "loom/parallel/ps/server_load.h"
#include "loom/parallel/ps/ps_exchange.h"
#include "loom/parallel/ps/server_update.h"

namespace loom::parallel::ps {

struct ParamServerOptions {
  PsRoles roles;
  std::int64_t job = 0;        // job_hash() of the run
  bool bounded = true;         // ssp; false: async
  std::int64_t staleness = 0;  // the SSP bound s
  // After every update applied, with the totals so far.
  std::function<void(const ServerLoad&)> on_step;
  ServerHooks hooks;
};

// Serves until every worker has sent stop; returns the totals (steps: updates applied).
ServerLoad run_param_server(comm::Communicator& world, const ParamServerOptions& options,
                            ServerUpdate& update);

}  // namespace loom::parallel::ps
