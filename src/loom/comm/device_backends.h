// The backends that move one device type's tensors, by name, as c10d registers a backend per
// device type: the registry behind comm.backend's "cuda:NAME". Built in, for any device type:
// "host" (StagingCommunicator: through host memory over the ranks' host communicator). "nccl"
// registers itself for CUDA when libloom_nccl.so loads (comm/nccl_module.cpp, built where the
// LibTorch is a CUDA build with NCCL's headers); the first request for a CUDA backend loads it.
//
// Threading: register and make from one thread at a time (start-up).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "loom/comm/communicator.h"
#include "loom/comm/rendezvous.h"

namespace loom::comm {

// What a device backend is made for: a group of the job's ranks, each on a device of its own
// or sharing one.
struct DeviceBackendRequest {
  std::shared_ptr<Rendezvous> rendezvous;
  std::vector<int> ranks;          // the group's job ranks, ascending (group rank i is ranks[i])
  std::string name;                // keeps the group's store keys apart ("world" for the whole job)
  c10::Device device = c10::kCPU;  // this rank's
  std::vector<std::string> devices;  // every group rank's device and host: "cuda:0@host1"
  CommOptions options;
  Communicator* host = nullptr;  // the same ranks' host communicator; outlives the backend

  // Group rank of this process.
  int group_rank() const;
};

struct DeviceBackend {
  std::string name;
  // Empty where this backend can serve the request, else why not: the same on every rank,
  // since it may look only at what every rank sees alike (the request's devices).
  std::function<std::string(const DeviceBackendRequest&)> why_not;
  std::function<std::unique_ptr<Communicator>(const DeviceBackendRequest&)> make;
};

// Adds (or replaces, by name) a backend for `type`'s tensors.
void register_device_backend(c10::DeviceType type, DeviceBackend backend);

// The backend `name` for the request's device: "auto" takes the first registered that can serve
// it, and "host" when none can. Exchanges the ranks' devices through the rendezvous first (every
// rank of the group calls this). Throws ConfigError naming comm.backend for an unknown
// name (problem unknown) or one that cannot serve (problem unusable).
std::unique_ptr<Communicator> make_device_backend(const std::string& name,
                                                  DeviceBackendRequest request);

}  // namespace loom::comm
