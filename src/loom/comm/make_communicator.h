// Chooses and builds the communicator a run asked for (comm.backend).
#pragma once

#include <memory>
#include <string>

#include "loom/comm/communicator.h"
#include "loom/comm/rendezvous.h"

namespace loom::comm {

// "tcp", "shm" (all ranks must share a host) or "auto" (shm when they all do; across hosts, shm
// inside each host and tcp between them, or plain tcp when every host has one rank). Adds the
// cross-rank call check when options.check_calls is set. Throws ConfigError for an unknown name or
// shm across hosts.
std::unique_ptr<Communicator> make_communicator(const std::string& backend,
                                                std::shared_ptr<Rendezvous> rendezvous,
                                                CommOptions options);

// A communicator over some of the job's ranks (`ranks`, ascending job ranks; group rank i is
// ranks[i]), e.g. the stages of one pipeline, or one stage's data-parallel replicas. Shared
// memory when they share a host and `backend` allows it, else tcp. `name` keeps the store keys
// of groups apart; only the members construct it, each with the same list and name.
std::unique_ptr<Communicator> make_group_communicator(const std::string& backend,
                                                      std::shared_ptr<Rendezvous> rendezvous,
                                                      const std::vector<int>& ranks,
                                                      const std::string& name, CommOptions options);

}  // namespace loom::comm
