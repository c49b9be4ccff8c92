#include "loom/comm/make_communicator.h"

#include "loom/comm/checked_communicator.h"
#include "loom/comm/device_backends.h"
#include "loom/comm/hierarchical_communicator.h"
#include "loom/comm/per_device_communicator.h"
#include "loom/comm/shm_communicator.h"
#include "loom/comm/staging_communicator.h"
#include "loom/comm/tcp_communicator.h"
#include "loom/core/backend_spec.h"
#include "loom/core/error.h"

namespace loom::comm {
namespace {

constexpr const char* kKey = "comm.backend";

std::vector<int> every_rank(int world) {
  std::vector<int> ranks(static_cast<std::size_t>(world));
  for (int r = 0; r < world; ++r) ranks[static_cast<std::size_t>(r)] = r;
  return ranks;
}

// The CPU's backend over the whole job: shm inside one host; across hosts tcp where every host
// has one rank, else shm inside each host and tcp between them.
std::unique_ptr<Communicator> job_host_backend(const std::string& name,
                                               std::shared_ptr<Rendezvous> rendezvous,
                                               CommOptions options) {
  const bool one_host = rendezvous->host_count() == 1;
  const bool one_rank_per_host = rendezvous->host_count() == rendezvous->world();
  if (name == "tcp" || (name == "auto" && one_rank_per_host && !one_host)) {
    return std::make_unique<TcpCommunicator>(std::move(rendezvous), options);
  }
  if (name == "auto" && !one_host) {
    return std::make_unique<HierarchicalCommunicator>(std::move(rendezvous), options);
  }
  if (!one_host) {
    throw ConfigError::at_key(kKey,
                              "shm connects ranks of one host, but this job spans " +
                                  std::to_string(rendezvous->host_count()) +
                                  " hosts (use auto or tcp)",
                              {{"problem", "backend_hosts"}});
  }
  return std::make_unique<ShmCommunicator>(std::move(rendezvous), options);
}

// The cross-rank check of every call around `communicator`, when asked for.
std::unique_ptr<Communicator> with_call_check(std::unique_ptr<Communicator> communicator,
                                              const CommOptions& options) {
  if (!options.check_calls) return communicator;
  return std::make_unique<CheckedCommunicator>(std::move(communicator));
}

// Adds the device's backend beside the host's when the ranks compute on a device, then the
// cross-rank check of every call when asked for.
std::unique_ptr<Communicator> finish(std::unique_ptr<Communicator> host, const BackendSpec& spec,
                                     std::shared_ptr<Rendezvous> rendezvous, std::vector<int> ranks,
                                     const std::string& name, const CommOptions& options,
                                     c10::Device device) {
  std::unique_ptr<Communicator> communicator = std::move(host);
  if (!device.is_cpu()) {
    DeviceBackendRequest request;
    request.rendezvous = std::move(rendezvous);
    request.ranks = std::move(ranks);
    request.name = name;
    request.device = device;
    request.options = options;
    request.host = communicator.get();
    std::unique_ptr<Communicator> on_device = make_device_backend(spec.cuda, std::move(request));
    communicator = std::make_unique<PerDeviceCommunicator>(std::move(communicator), device.type(),
                                                           std::move(on_device));
  }
  return with_call_check(std::move(communicator), options);
}

}  // namespace

std::unique_ptr<Communicator> make_communicator(const std::string& backend,
                                                std::shared_ptr<Rendezvous> rendezvous,
                                                CommOptions options, c10::Device device) {
  const BackendSpec spec = parse_backend_spec(backend, kKey);
  std::vector<int> ranks = every_rank(rendezvous->world());
  auto host = job_host_backend(spec.cpu, rendezvous, options);
  return finish(std::move(host), spec, std::move(rendezvous), std::move(ranks), "world", options,
                device);
}

std::unique_ptr<Communicator> make_host_staged_communicator(const std::string& backend,
                                                            std::shared_ptr<Rendezvous> rendezvous,
                                                            CommOptions options,
                                                            c10::Device device) {
  const BackendSpec spec = parse_backend_spec(backend, kKey);
  std::unique_ptr<Communicator> communicator = job_host_backend(spec.cpu, rendezvous, options);
  if (!device.is_cpu()) {
    auto staging = std::make_unique<StagingCommunicator>(*communicator);
    communicator = std::make_unique<PerDeviceCommunicator>(std::move(communicator), device.type(),
                                                           std::move(staging));
  }
  return with_call_check(std::move(communicator), options);
}

std::unique_ptr<Communicator> make_group_communicator(const std::string& backend,
                                                      std::shared_ptr<Rendezvous> rendezvous,
                                                      const std::vector<int>& ranks,
                                                      const std::string& name, CommOptions options,
                                                      c10::Device device) {
  const BackendSpec spec = parse_backend_spec(backend, kKey);
  const std::vector<int>& host_of = rendezvous->host_of_rank();
  bool one_host = true;
  for (int r : ranks) one_host = one_host && host_of[r] == host_of[ranks.front()];
  std::unique_ptr<Communicator> host;
  // Groups take shm inside one host, else tcp (a group's staged collectives are rare enough).
  if (spec.cpu != "tcp" && one_host) {
    host = std::make_unique<ShmCommunicator>(rendezvous, options, ranks, name);
  } else {
    host = std::make_unique<TcpCommunicator>(rendezvous, options, ranks, name);
  }
  return finish(std::move(host), spec, std::move(rendezvous), ranks, name, options, device);
}

}  // namespace loom::comm
