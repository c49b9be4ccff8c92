#include "loom/parallel/pipeline/partitioner.h"

#include <algorithm>
#include <limits>
#include <sstream>

#include "loom/core/error.h"

namespace loom::parallel::pipeline {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

// Costs of blocks [first, end) as stage `stage` of `stages`, from prefix sums.
class StageCoster {
 public:
  StageCoster(const std::vector<BlockProfile>& blocks, const PartitionOptions& options)
      : blocks_(blocks), options_(options) {
    compute_.push_back(0);
    activations_.push_back(0);
    state_.push_back(0);
    for (const auto& b : blocks) {
      compute_.push_back(compute_.back() + b.compute_seconds());
      activations_.push_back(activations_.back() + b.activation_bytes);
      state_.push_back(state_.back() + b.parameter_bytes * options.state_per_parameter_byte +
                       b.buffer_bytes);
    }
  }

  StagePlan plan(int stage, int first, int end) const {
    const int stages = static_cast<int>(options_.in_flight.size());
    StagePlan p;
    p.first_block = first;
    p.blocks = end - first;
    p.compute_seconds = compute_[end] - compute_[first];
    if (options_.link_bytes_per_second > 0) {
      double bytes = 0;
      if (stage + 1 < stages) bytes += blocks_[static_cast<size_t>(end - 1)].output_bytes;
      if (stage > 0) bytes += blocks_[static_cast<size_t>(first - 1)].output_bytes;  // gradient
      p.transfer_seconds = bytes / options_.link_bytes_per_second;
    }
    double backward_peak = 0, tied_copies = 0;
    for (int b = first; b < end; ++b) {
      const BlockProfile& block = blocks_[static_cast<size_t>(b)];
      backward_peak = std::max(backward_peak, block.backward_peak_bytes);
      if (block.tied_owner >= 0 && (block.tied_owner < first || block.tied_owner >= end)) {
        tied_copies += block.tied_parameter_bytes * options_.state_per_parameter_byte;
      }
    }
    p.memory_bytes =
        options_.resident_bytes + state_[end] - state_[first] + tied_copies +
        options_.in_flight[static_cast<size_t>(stage)] * (activations_[end] - activations_[first]) +
        backward_peak;
    return p;
  }

  bool fits(const StagePlan& p) const {
    return options_.memory_cap_bytes <= 0 || p.memory_bytes <= options_.memory_cap_bytes;
  }

 private:
  const std::vector<BlockProfile>& blocks_;
  const PartitionOptions& options_;
  std::vector<double> compute_, activations_, state_;
};

std::string megabytes(double bytes) {
  std::ostringstream out;
  out.precision(1);
  out << std::fixed << bytes / (1 << 20) << " MB";
  return out.str();
}

// The smallest achievable largest-stage memory over all partitions (for the error message).
double least_peak_memory(const StageCoster& coster, int blocks, int stages) {
  std::vector<std::vector<double>> best(
      static_cast<size_t>(stages + 1),
      std::vector<double>(static_cast<size_t>(blocks + 1), kInfinity));
  best[0][0] = 0;
  for (int k = 1; k <= stages; ++k) {
    for (int j = k; j <= blocks; ++j) {
      for (int i = k - 1; i < j; ++i) {
        const double before = best[static_cast<size_t>(k - 1)][static_cast<size_t>(i)];
        if (before == kInfinity) continue;
        const double here = std::max(before, coster.plan(k - 1, i, j).memory_bytes);
        auto& cell = best[static_cast<size_t>(k)][static_cast<size_t>(j)];
        cell = std::min(cell, here);
      }
    }
  }
  return best[static_cast<size_t>(stages)][static_cast<size_t>(blocks)];
}

}  // namespace

double state_per_parameter_byte(int optimizer_states, int zero_stage, int replicas) {
  const double share = zero_stage > 0 ? 1.0 / std::max(1, replicas) : 1.0;
  const double gradients = zero_stage > 0 ? 1.0 + share : 1.0;
  return 1.0 + gradients + optimizer_states * share;
}

double Partition::slowest_seconds() const {
  double out = 0;
  for (const auto& s : stages) out = std::max(out, s.seconds());
  return out;
}

double Partition::peak_memory_bytes() const {
  double out = 0;
  for (const auto& s : stages) out = std::max(out, s.memory_bytes);
  return out;
}

std::string Partition::split() const {
  std::string out;
  for (const auto& s : stages) out += (out.empty() ? "" : ",") + std::to_string(s.blocks);
  return out;
}

std::vector<int> Partition::split_counts() const {
  std::vector<int> out;
  for (const auto& s : stages) out.push_back(s.blocks);
  return out;
}

Partition evaluate_split(const std::vector<BlockProfile>& blocks, const std::vector<int>& split,
                         const PartitionOptions& options) {
  const int stages = static_cast<int>(options.in_flight.size());
  if (static_cast<int>(split.size()) != stages) {
    throw ConfigError("config key 'parallel.pipeline.split': " + std::to_string(split.size()) +
                      " stages given, the pipeline has " + std::to_string(stages));
  }
  int total = 0;
  for (int n : split) {
    if (n < 1) {
      throw ConfigError(
          "config key 'parallel.pipeline.split': every stage needs at least one "
          "block, got " +
          std::to_string(n));
    }
    total += n;
  }
  if (total != static_cast<int>(blocks.size())) {
    throw ConfigError("config key 'parallel.pipeline.split': the stages hold " +
                      std::to_string(total) + " blocks, the model has " +
                      std::to_string(blocks.size()));
  }
  StageCoster coster(blocks, options);
  Partition p;
  int first = 0;
  for (int s = 0; s < stages; ++s) {
    p.stages.push_back(coster.plan(s, first, first + split[static_cast<size_t>(s)]));
    first += split[static_cast<size_t>(s)];
  }
  return p;
}

Partition partition_blocks(const std::vector<BlockProfile>& blocks,
                           const PartitionOptions& options) {
  const int n = static_cast<int>(blocks.size());
  const int stages = static_cast<int>(options.in_flight.size());
  if (stages < 1) throw ConfigError("partition: no stages to fill");
  if (n < stages) {
    throw ConfigError("config key 'parallel.pipeline.stages': the model has " + std::to_string(n) +
                      " blocks, fewer than the " + std::to_string(stages) +
                      " stages; every stage needs at least one block");
  }
  StageCoster coster(blocks, options);
  // best[k][j]: the smallest slowest-stage time for blocks [0, j) in stages [0, k);
  // cut[k][j]: where stage k-1 begins in that optimum.
  const auto rows = static_cast<size_t>(stages + 1), cols = static_cast<size_t>(n + 1);
  std::vector<std::vector<double>> best(rows, std::vector<double>(cols, kInfinity));
  std::vector<std::vector<int>> cut(rows, std::vector<int>(cols, -1));
  best[0][0] = 0;
  for (int k = 1; k <= stages; ++k) {
    // Stage k-1 ends at block j; the later stages need a block each.
    for (int j = k; j <= n - (stages - k); ++j) {
      for (int i = k - 1; i < j; ++i) {
        const double before = best[static_cast<size_t>(k - 1)][static_cast<size_t>(i)];
        if (before == kInfinity) continue;
        const StagePlan stage = coster.plan(k - 1, i, j);
        if (!coster.fits(stage)) continue;
        const double slowest = std::max(before, stage.seconds());
        if (slowest < best[static_cast<size_t>(k)][static_cast<size_t>(j)]) {
          best[static_cast<size_t>(k)][static_cast<size_t>(j)] = slowest;
          cut[static_cast<size_t>(k)][static_cast<size_t>(j)] = i;
        }
      }
    }
  }
  if (best[rows - 1][cols - 1] == kInfinity) {
    throw OverMemoryCap("config key 'parallel.pipeline.memory_cap_mb': no split of the model's " +
                            std::to_string(n) + " blocks into " + std::to_string(stages) +
                            " stages fits " + megabytes(options.memory_cap_bytes) +
                            " per stage; the best split needs " +
                            megabytes(least_peak_memory(coster, n, stages)) +
                            ": raise the cap to that, or use more stages or micro-batches that "
                            "hold fewer activations",
                        {{"value", std::to_string(options.memory_cap_bytes)},
                         {"needed_bytes", std::to_string(least_peak_memory(coster, n, stages))}});
  }
  std::vector<int> split(static_cast<size_t>(stages));
  for (int k = stages, j = n; k > 0; --k) {
    const int i = cut[static_cast<size_t>(k)][static_cast<size_t>(j)];
    split[static_cast<size_t>(k - 1)] = j - i;
    j = i;
  }
  return evaluate_split(blocks, split, options);
}

std::vector<int> uniform_split(int blocks, int stages) {
  std::vector<int> split(static_cast<size_t>(stages), blocks / stages);
  for (int s = 0; s < blocks % stages; ++s) ++split[static_cast<size_t>(s)];
  return split;
}

std::vector<int> parameter_balanced_split(const std::vector<BlockProfile>& blocks, int stages) {
  // The same dynamic programme over parameter counts alone: the exact minimum of the largest
  // stage's parameters (DeepSpeed reaches it by binary search over the bound).
  std::vector<BlockProfile> by_parameters = blocks;
  for (auto& b : by_parameters) {
    b = BlockProfile{b.name, b.parameters, 0, 0, 0, 0, 0, b.parameters};
  }
  PartitionOptions options;
  options.in_flight.assign(static_cast<size_t>(stages), 1);
  const Partition p = partition_blocks(by_parameters, options);
  std::vector<int> split;
  for (const auto& s : p.stages) split.push_back(s.blocks);
  return split;
}

}  // namespace loom::parallel::pipeline
