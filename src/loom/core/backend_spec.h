// comm.backend as text, in c10d's way of naming a backend per device type: "shm", or
// "cpu:shm,cuda:nccl". A bare name is the CPU's backend (auto, shm or tcp); "cuda:NAME" chooses
// what moves a GPU run's tensors (auto, nccl or host). What is not named is auto.
#pragma once

#include <string>

namespace loom {

struct BackendSpec {
  std::string cpu = "auto";   // auto | shm | tcp
  std::string cuda = "auto";  // auto | nccl | host
};

// Throws ConfigError naming `key` (problem backend) for text that is none of these: an unknown
// name or device type, a device type named twice.
BackendSpec parse_backend_spec(const std::string& text, const std::string& key);

}  // namespace loom
