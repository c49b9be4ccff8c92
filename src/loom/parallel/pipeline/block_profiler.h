// Measures every block of a model on this machine with a real micro-batch, for the partitioner
// and the simulator: forward time, backward time split into the input gradient (I) and the
// weight gradients (W = full backward - I), the activations the forward keeps for backward, the
// output that would cross a stage boundary, and the parameter and buffer bytes (the partitioner's
// memory model adds the gradients and optimizer state the run keeps for them).
//
// Times are medians of `repeats` runs after one warm-up. Activation bytes come from the caching
// allocator's count of bytes in use (runtime.allocator: caching); without it they are 0. On a
// GPU (the model's and the batch's device) each timed span waits for the device's work to end,
// and the bytes are the CUDA caching allocator's.
// Runs the model in its current mode: in train mode BatchNorm statistics move, so profile a
// model whose state does not matter (as `loom pipeline plan` does) or restore it afterwards.
#pragma once

#include <functional>

#include "loom/core/caching_allocator.h"
#include "loom/models/loss.h"
#include "loom/models/model.h"
#include "loom/parallel/pipeline/partitioner.h"

namespace loom::parallel::pipeline {

struct BlockProfileOptions {
  int repeats = 3;
  at::ScalarType autocast = at::kFloat;  // as the run computes (runtime.precision)
  c10::Device device = c10::kCPU;        // where the model and the batch are
  // The bytes a tensor group's collectives have moved so far (a model split over a
  // PlanningTensorGroup); null: none.
  std::function<double()> tensor_bytes_moved;
};

// `input` and `labels` form one micro-batch; the loss is charged to the last block.
// `allocator`: the CPU's caching allocator, where the model is on the CPU (null: none).
std::vector<BlockProfile> profile_blocks(models::Model& model, const at::Tensor& input,
                                         const at::Tensor& labels, const models::Loss& loss,
                                         const BlockProfileOptions& options,
                                         const CachingCpuAllocator* allocator);

}  // namespace loom::parallel::pipeline
