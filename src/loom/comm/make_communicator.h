// Chooses and builds the communicator a run asked for (comm.backend).
#pragma once

#include <memory>
#include <string>

#include "loom/comm/communicator.h"
#include "loom/comm/rendezvous.h"

namespace loom::comm {

// "gloo", "shm" (all ranks must share a host) or "auto" (shm when they all do; across hosts,
// shm inside each host and Gloo between them, or plain Gloo when every host has one rank). Adds the
// cross-rank call check when options.check_calls is set. Throws ConfigError for an unknown name or
// shm across hosts.
std::unique_ptr<Communicator> make_communicator(const std::string& backend,
                                                std::shared_ptr<Rendezvous> rendezvous,
                                                CommOptions options);

}  // namespace loom::comm
