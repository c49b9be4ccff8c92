// Chooses and builds the communicator a run asked for (comm.backend).
#pragma once

#include <memory>
#include <string>

#include "loom/comm/communicator.h"
#include "loom/comm/rendezvous.h"

namespace loom::comm {

// `backend` is comm.backend (core/backend_spec.h). The CPU's: "tcp", "shm" (all ranks must share
// a host) or "auto" (shm when they all do; across hosts, shm inside each host and tcp between
// them, or plain tcp when every host has one rank). Where the ranks compute on `device` (a GPU),
// the communicator moves that device's tensors too, through the backend comm.backend names for
// its type (comm/device_backends.h), and CPU tensors through the CPU's. Adds the cross-rank call
// check when options.check_calls is set. Throws ConfigError naming comm.backend for text that is
// no backend (problem backend) or shm across hosts (problem backend_hosts), and the device
// backends' errors.
std::unique_ptr<Communicator> make_communicator(const std::string& backend,
                                                std::shared_ptr<Rendezvous> rendezvous,
                                                CommOptions options,
                                                c10::Device device = c10::kCPU);

// The job's communicator where some ranks keep no device (parameter servers, whose tensors are
// the CPU's): the CPU's backend alike on every rank, and where this rank computes on `device`,
// that device's tensors staged through host memory over it. No device backend is agreed among
// the ranks, as the servers could take no part in one.
std::unique_ptr<Communicator> make_host_staged_communicator(const std::string& backend,
                                                            std::shared_ptr<Rendezvous> rendezvous,
                                                            CommOptions options,
                                                            c10::Device device);

// A communicator over some of the job's ranks (`ranks`, ascending job ranks; group rank i is
// ranks[i]), e.g. the stages of one pipeline, or one stage's data-parallel replicas. Shared
// memory when they share a host and `backend` allows it, else tcp; `device`'s tensors as for
// make_communicator. `name` keeps the store keys of groups apart; only the members construct it,
// each with the same list and name.
std::unique_ptr<Communicator> make_group_communicator(const std::string& backend,
                                                      std::shared_ptr<Rendezvous> rendezvous,
                                                      const std::vector<int>& ranks,
                                                      const std::string& name, CommOptions options,
                                                      c10::Device device = c10::kCPU);

}  // namespace loom::comm
