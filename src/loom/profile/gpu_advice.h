// The advisor's findings for a run on a GPU. The host's CPU rules (compute threads, the CPU's
// BLAS and bf16, CPU utilisation: advisor.h) say nothing of a GPU's step and are not applied
// there; the phase rules (input_bound, exposed_comm, pipeline_bubble) and the memory savings
// apply on either. On a GPU:
//   precision      fp32 on a GPU with bf16 tensor cores (compute capability 8.0 on), which
//                  compute bf16 at many times fp32's rate (an H100's dense bf16 is 989 TFLOP/s
//                  against 67 for fp32)
//   memory_format  a convolutional model in the contiguous layout: cuDNN's convolutions run
//                  fastest in channels_last
//   low_mfu        model FLOP utilisation below 25% of the peak calibrated on the device
//                  (moderate), below 10% (high), with the likely cause, in this order: fp32 (on a
//                  GPU with bf16), the
//                  input (data waits >= 20% of the step), a small micro-batch (< 32 samples), or
//                  else many small kernels, each waiting on its launch (a larger batch). torch
//                  eager trains GPT-2 124M at 26% MFU on an H100 and torch.compile at 39%
//                  (ANCHORS.md), so below 25% leaves a known gain on the table.
//   device_memory  the caching allocator's peak reservation >= 90% of the GPU's memory: the next
//                  larger batch or a fragmenting allocation runs out
//   host_sync      the host waited for the GPU once a step or more (high from four), beyond the
//                  fp16 loss scale's one check: torch's synchronisation warnings counted over the
//                  first steady steps (host_sync_counter.h), by phase. Each wait drains the
//                  GPU's queue, and the GPU idles while the host queues the next work
// Apart from advisor.cpp: what slows a GPU's step is its own subject.
#pragma once

#include <vector>

#include "loom/profile/advisor.h"

namespace loom::profile {

// The findings above, for a run whose RunProfile::device is a GPU; nothing otherwise.
void add_gpu_findings(const RunProfile& run, std::vector<Finding>& out);

}  // namespace loom::profile
