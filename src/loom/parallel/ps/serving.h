// A parameter server's part in a job (parallel.mode: parameter_servers; the last
// parallel.ps.servers ranks serve): who serves and where, said among every rank as the job is
// joined, and serving until the workers end. The job's entry (train/job.h) calls both.
#pragma once

#include "loom/comm/communicator.h"
#include "loom/comm/rendezvous.h"
#include "loom/core/config.h"
#include "loom/parallel/layout_plan.h"
#include "loom/parallel/ps/ps_bucket_exchange.h"
#include "loom/parallel/ps/ps_exchange.h"
#include "loom/parallel/ps/server_load.h"
#include "loom/parallel/ps/server_optimizer.h"

namespace loom::parallel::ps {

// The servers' place in the job (the last ranks), the job's hash and every server's host: every
// rank says its host, so that workers can name a server by where it runs. Collective over every
// rank of the job.
PsExchangeOptions describe_servers(comm::Rendezvous& rendezvous, const LayoutPlan& plan);

struct ServingOptions {
  PsExchangeOptions servers;  // from describe_servers
  // The run's optimizer, for servers that run it (parallel.ps.optimizer_on: server).
  RunOptimizer optimizer;
  // The server's spans (for trace files, which train/ writes) and the end of its workers.
  ServerHooks hooks;
};

// Serves as this rank's parameter server (plan.serves()) of the job's communicator `world` until
// the workers stop, as parallel.ps.* says: summing gradients, or keeping the parameters (async,
// SSP, the optimizer on the servers); logs its load now and then. Returns the load it served.
ServerLoad serve_parameters(comm::Communicator& world, const LayoutPlan& plan, const Config& config,
                            const ServingOptions& options);

}  // namespace loom::parallel::ps
