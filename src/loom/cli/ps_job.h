// How the ranks of a parameter-server job (parallel.mode: ps) learn their roles: the last
// parallel.ps.servers ranks serve, the others train (`loom train` or `loom ps-server` on a server
// rank both serve). Shared by both commands so that they agree.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "loom/comm/communicator.h"
#include "loom/comm/rendezvous.h"
#include "loom/core/config.h"
#include "loom/parallel/ps/ps_exchange.h"

namespace loom::cli {

struct PsJob {
  parallel::ps::PsRoles roles;
  std::int64_t job = 0;                   // job_hash() of the rendezvous's job token
  std::vector<std::string> server_hosts;  // host name of each server
};

// Collective over every rank. Throws ConfigError naming parallel.ps.servers when it leaves no
// worker.
PsJob join_ps_job(const Config& config, comm::Rendezvous& rendezvous);

// comm.timeout_s and comm.check_calls as the communicators' options.
comm::CommOptions comm_options(const Config& config);

// The communicator of the whole job, as comm.* configures it.
std::unique_ptr<comm::Communicator> job_communicator(const Config& config,
                                                     std::shared_ptr<comm::Rendezvous> rendezvous);

// Serves as this rank's server until the workers stop, as parallel.ps.* says (summing gradients,
// or keeping the parameters: async, SSP, the optimizer on the servers), logging its load now and
// then; prints its totals. Returns the exit code (0).
// With profile.trace (and an `out_dir`) the server's spans of the traced steps go to its trace
// file there, which worker 0 merges into trace.json.
int serve_parameters(comm::Communicator& world, const PsJob& job, const Config& config,
                     const std::string& out_dir);

}  // namespace loom::cli
