// The runs the advisor's tests start from, and how they look a finding up: shared by the tests
// of the advisor's rules (advisor_test, gpu_advice_test, memory_advice_test, tensor_advice_test).
#pragma once

#include <string>
#include <vector>

#include "loom/profile/advisor.h"

namespace loom::profile {

// A run of 100 steps of 10 ms with the given share of each step waiting for data.
inline RunProfile run_waiting(double data_wait_share) {
  RunProfile r;
  r.steps = 100;
  r.step_times.wall = 1.0;
  r.step_times.seconds[static_cast<size_t>(Phase::kDataWait)] = data_wait_share;
  r.step_times.seconds[static_cast<size_t>(Phase::kForward)] = 1.0 - data_wait_share;
  r.usable_cores = 2;
  r.compute_threads = 2;
  r.loader_threads = 1;
  r.loader_decodes = true;
  r.precision = "bf16";
  r.native_bf16 = true;
  r.memory_format = "channels_last";
  r.convolutional = true;
  r.batch_size = 64;
  return r;
}

inline const Finding* find(const std::vector<Finding>& findings, const std::string& id) {
  for (const auto& f : findings) {
    if (f.id == id) return &f;
  }
  return nullptr;
}

}  // namespace loom::profile
