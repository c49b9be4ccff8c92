// Precision, memory layout and thread count chosen for the hardware, each with the reason, so
// the choice can be printed and recorded. `auto` resolves as:
//   precision     bf16 autocast when the CPU has AVX-512 BF16 or AMX and LibTorch has oneDNN
//   memory_format channels_last for convolutional models
//   threads       the cores this process may run on (affinity and cgroup quota)
#pragma once

#include <string>

#include "loom/core/autocast_scope.h"
#include "loom/core/config.h"
#include "loom/core/topology.h"

namespace loom::train {

struct RuntimeChoice {
  std::string precision;      // fp32 | bf16
  std::string memory_format;  // contiguous | channels_last
  int threads = 1;
  std::string precision_reason, memory_format_reason, threads_reason;

  bool bf16() const { return precision == "bf16"; }
};

RuntimeChoice choose_runtime(const RuntimeConfig& config, const Topology& topology,
                             bool convolutional_model, bool onednn_available);

// AutocastScope lives in core/autocast_scope.h: every layer that runs a forward pass uses it.
using loom::AutocastScope;

}  // namespace loom::train
