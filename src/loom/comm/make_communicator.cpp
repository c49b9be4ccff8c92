#include "loom/comm/make_communicator.h"

#include "loom/comm/checked_communicator.h"
#include "loom/comm/hierarchical_communicator.h"
#include "loom/comm/shm_communicator.h"
#include "loom/comm/tcp_communicator.h"
#include "loom/core/error.h"

namespace loom::comm {

std::unique_ptr<Communicator> make_communicator(const std::string& backend,
                                                std::shared_ptr<Rendezvous> rendezvous,
                                                CommOptions options) {
  const bool one_host = rendezvous->host_count() == 1;
  // Across hosts shared memory helps only where a host has more than one rank.
  const bool one_rank_per_host = rendezvous->host_count() == rendezvous->world();
  std::unique_ptr<Communicator> communicator;
  if (backend == "tcp" || (backend == "auto" && one_rank_per_host && !one_host)) {
    communicator = std::make_unique<TcpCommunicator>(std::move(rendezvous), options);
  } else if (backend == "auto" && !one_host) {
    communicator = std::make_unique<HierarchicalCommunicator>(std::move(rendezvous), options);
  } else if (backend == "shm" || backend == "auto") {
    if (!one_host) {
      throw ConfigError("comm.backend: shm connects ranks of one host, but this job spans " +
                        std::to_string(rendezvous->host_count()) + " hosts (use auto or tcp)");
    }
    communicator = std::make_unique<ShmCommunicator>(std::move(rendezvous), options);
  } else {
    throw ConfigError("comm.backend: unknown backend '" + backend + "' (auto, shm or tcp)");
  }
  if (options.check_calls) {
    communicator = std::make_unique<CheckedCommunicator>(std::move(communicator));
  }
  return communicator;
}

std::unique_ptr<Communicator> make_group_communicator(const std::string& backend,
                                                      std::shared_ptr<Rendezvous> rendezvous,
                                                      const std::vector<int>& ranks,
                                                      const std::string& name,
                                                      CommOptions options) {
  const std::vector<int>& host_of = rendezvous->host_of_rank();
  bool one_host = true;
  for (int r : ranks) one_host = one_host && host_of[r] == host_of[ranks.front()];
  if (backend != "tcp" && backend != "auto" && backend != "shm") {
    throw ConfigError("comm.backend: unknown backend '" + backend + "' (auto, shm or tcp)");
  }
  if (backend != "tcp" && one_host) {
    return std::make_unique<ShmCommunicator>(std::move(rendezvous), options, ranks, name);
  }
  return std::make_unique<TcpCommunicator>(std::move(rendezvous), options, ranks, name);
}

}  // namespace loom::comm
