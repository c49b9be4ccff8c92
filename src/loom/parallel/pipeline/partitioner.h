// Splits a model's chain of blocks into contiguous pipeline stages. The automatic partition is
// the exact optimum by dynamic programming: the smallest possible slowest stage (computation plus
// the transfers at its boundaries), subject to every stage fitting its memory cap, with at least
// one block per stage. Manual splits and the usual baselines (equal block counts, DeepSpeed's
// balance of parameter counts) are evaluated with the same cost model, so they can be compared.
#pragma once

#include <string>
#include <vector>

#include "loom/core/error.h"

namespace loom::parallel::pipeline {

// One block as measured on this machine, per micro-batch.
struct BlockProfile {
  std::string name;
  double forward_seconds = 0;
  double backward_input_seconds = 0;
  double backward_weight_seconds = 0;
  double activation_bytes = 0;  // kept from forward for backward
  double output_bytes = 0;      // its output: what crosses a stage boundary after it
  double parameter_bytes = 0;   // its trainable parameters (their gradients and optimizer
                                // state follow from PartitionOptions::state_per_parameter_byte)
  double buffer_bytes = 0;      // its buffers (kept as they are)
  // What its backward needs for a moment beyond what it keeps (gradients before they are added,
  // kernel workspaces): a stage peaks at the largest of its blocks'.
  double backward_peak_bytes = 0;
  double parameters = 0;  // element count, for the parameter-balanced baseline
  // Parameters it reads that block `tied_owner` owns (a tied embedding): a stage without the
  // owner keeps a copy, with its gradient and optimizer state (-1: none).
  double tied_parameter_bytes = 0;
  int tied_owner = -1;
  // Split over a tensor group (parallel.tensor): the bytes its collectives move per rank in
  // forward and in backward, and their time at the link's speed, which forward_seconds and
  // backward_input_seconds include (the collectives block the block's compute).
  double tensor_forward_bytes = 0, tensor_backward_bytes = 0;
  double tensor_comm_seconds = 0;

  double compute_seconds() const {
    return forward_seconds + backward_input_seconds + backward_weight_seconds;
  }
};

// Bytes a stage keeps per byte of parameters: the parameters, their gradients and
// `optimizer_states` state tensors each (0 plain SGD, 1 momentum, 2 Adam). Under ZeRO (stage 1 or
// 2, zero_partition.h) over `replicas` data-parallel copies of each stage, a rank keeps
// 1/replicas of the optimizer state and its reduced gradient shards besides the full gradients:
// a pipeline accumulates its micro-batches' gradients in full buckets, so at the peak ZeRO-2
// holds what ZeRO-1 holds (it frees the buckets only after the step).
double state_per_parameter_byte(int optimizer_states, int zero_stage, int replicas);

struct PartitionOptions {
  // Stage s holds in_flight[s] micro-batches of activations at its peak (from the schedule's
  // simulation: 1F1B min(P - s, M), GPipe M); its size is the number of stages.
  std::vector<int> in_flight;
  double memory_cap_bytes = 0;          // per stage; 0: no cap
  double state_per_parameter_byte = 2;  // see state_per_parameter_byte(); 2: SGD's
  double resident_bytes = 0;            // held by every rank whatever its stages (e.g. its data)
  double link_bytes_per_second = 0;     // 0: transfers are free
};

struct StagePlan {
  int first_block = 0, blocks = 0;
  double compute_seconds = 0;   // forward + backward of one micro-batch
  double transfer_seconds = 0;  // sending its output forward and its input gradient back
  double memory_bytes = 0;      // state + in-flight activations
  double seconds() const { return compute_seconds + transfer_seconds; }
};

struct Partition {
  std::vector<StagePlan> stages;
  double slowest_seconds() const;
  double peak_memory_bytes() const;
  // Blocks per stage, e.g. "4,6" (the form of parallel.pipeline.split).
  std::string split() const;
  std::vector<int> split_counts() const;  // blocks per stage
};

// The stage costs of a given split (blocks per stage). Throws ConfigError naming
// parallel.pipeline.split when it does not cover the blocks with at least one per stage.
Partition evaluate_split(const std::vector<BlockProfile>& blocks, const std::vector<int>& split,
                         const PartitionOptions& options);

// No split of the blocks fits PartitionOptions::memory_cap_bytes (a ConfigError naming
// parallel.pipeline.memory_cap_mb and the least any split needs): a planner may then try holding
// fewer activations.
class OverMemoryCap : public ConfigError {
 public:
  using ConfigError::ConfigError;
};

// The optimal partition into options.in_flight.size() stages. Throws ConfigError when there are
// fewer blocks than stages, or OverMemoryCap when no partition fits the cap (saying the smallest
// cap that would).
Partition partition_blocks(const std::vector<BlockProfile>& blocks,
                           const PartitionOptions& options);

// Baselines, for comparison: as many blocks per stage as possible (the remainder spread over
// the first stages), and DeepSpeed's "parameters" method, which minimises the largest stage's
// parameter count.
std::vector<int> uniform_split(int blocks, int stages);
std::vector<int> parameter_balanced_split(const std::vector<BlockProfile>& blocks, int stages);

}  // namespace loom::parallel::pipeline
