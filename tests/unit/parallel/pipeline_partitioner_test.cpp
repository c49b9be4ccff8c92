// The partitioner against brute force, its errors, and the baselines.
#include <gtest/gtest.h>

#include <functional>
#include <random>

#include "loom/core/error.h"
#include "loom/parallel/pipeline/partitioner.h"

namespace loom::parallel::pipeline {
namespace {

std::vector<BlockProfile> random_blocks(std::mt19937& rng, int n) {
  std::uniform_real_distribution<double> time(0.1, 3.0), bytes(1.0, 100.0);
  std::vector<BlockProfile> blocks;
  for (int i = 0; i < n; ++i) {
    BlockProfile b;
    b.name = "b" + std::to_string(i);
    b.forward_seconds = time(rng);
    b.backward_input_seconds = time(rng);
    b.backward_weight_seconds = time(rng);
    b.activation_bytes = bytes(rng);
    b.output_bytes = bytes(rng);
    b.parameter_bytes = bytes(rng) / 2;  // with their gradients (the default state per byte)
    b.parameters = bytes(rng);
    blocks.push_back(b);
  }
  return blocks;
}

// Every split of n blocks into `stages` non-empty stages.
void each_split(int n, int stages, const std::function<void(const std::vector<int>&)>& visit,
                std::vector<int> prefix = {}) {
  if (static_cast<int>(prefix.size()) == stages - 1) {
    int used = 0;
    for (int k : prefix) used += k;
    if (n - used < 1) return;
    prefix.push_back(n - used);
    visit(prefix);
    return;
  }
  int used = 0;
  for (int k : prefix) used += k;
  for (int k = 1; used + k <= n - (stages - 1 - static_cast<int>(prefix.size())); ++k) {
    auto next = prefix;
    next.push_back(k);
    each_split(n, stages, visit, next);
  }
}

TEST(Partitioner, MatchesBruteForceOnRandomCases) {
  std::mt19937 rng(7);
  int with_cap = 0, infeasible = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 2 + static_cast<int>(rng() % 8);
    const int stages = 1 + static_cast<int>(rng() % std::min(n, 4));
    const auto blocks = random_blocks(rng, n);
    PartitionOptions options;
    for (int s = 0; s < stages; ++s) options.in_flight.push_back(stages - s);  // as 1F1B
    options.link_bytes_per_second = trial % 3 == 0 ? 0.0 : 50.0;
    if (trial % 2 == 0) options.memory_cap_bytes = 150.0 + static_cast<double>(rng() % 400);
    double brute = std::numeric_limits<double>::infinity();
    each_split(n, stages, [&](const std::vector<int>& split) {
      const Partition p = evaluate_split(blocks, split, options);
      if (options.memory_cap_bytes > 0 && p.peak_memory_bytes() > options.memory_cap_bytes) return;
      brute = std::min(brute, p.slowest_seconds());
    });
    if (brute == std::numeric_limits<double>::infinity()) {
      ++infeasible;
      EXPECT_THROW(partition_blocks(blocks, options), ConfigError);
      continue;
    }
    with_cap += options.memory_cap_bytes > 0;
    const Partition best = partition_blocks(blocks, options);
    EXPECT_NEAR(best.slowest_seconds(), brute, 1e-9) << "trial " << trial;
    if (options.memory_cap_bytes > 0) {
      EXPECT_LE(best.peak_memory_bytes(), options.memory_cap_bytes) << "trial " << trial;
    }
    int covered = 0;
    for (const auto& s : best.stages) {
      EXPECT_EQ(s.first_block, covered);
      EXPECT_GE(s.blocks, 1);
      covered += s.blocks;
    }
    EXPECT_EQ(covered, n);
  }
  EXPECT_GT(with_cap, 50);
  EXPECT_GT(infeasible, 5);
}

TEST(Partitioner, NeverWorseThanTheBaselines) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 50; ++trial) {
    const auto blocks = random_blocks(rng, 12);
    PartitionOptions options;
    options.in_flight = std::vector<int>{3, 2, 1};
    const double best = partition_blocks(blocks, options).slowest_seconds();
    EXPECT_LE(best,
              evaluate_split(blocks, uniform_split(12, 3), options).slowest_seconds() + 1e-12);
    EXPECT_LE(
        best,
        evaluate_split(blocks, parameter_balanced_split(blocks, 3), options).slowest_seconds() +
            1e-12);
  }
}

TEST(Partitioner, BaselineSplits) {
  EXPECT_EQ(uniform_split(10, 3), (std::vector<int>{4, 3, 3}));
  std::vector<BlockProfile> blocks(5);
  const double parameters[] = {10, 1, 1, 1, 10};
  for (int i = 0; i < 5; ++i) blocks[static_cast<size_t>(i)].parameters = parameters[i];
  // {10}, {1,1,1,10} has 13; {10,1}, {1,1,10} 12; {10,1,1}, {1,10} 12: the largest is 12.
  const auto split = parameter_balanced_split(blocks, 2);
  int first = 0;
  double biggest = 0;
  for (int k : split) {
    double sum = 0;
    for (int i = first; i < first + k; ++i) sum += parameters[i];
    biggest = std::max(biggest, sum);
    first += k;
  }
  EXPECT_EQ(biggest, 12);
}

// Parameters, gradients and optimizer state per parameter byte, and where a stage keeps them.
TEST(Partitioner, StateFollowsTheOptimizerAndZero) {
  EXPECT_DOUBLE_EQ(state_per_parameter_byte(0, 0, 1), 2.0);  // plain SGD
  EXPECT_DOUBLE_EQ(state_per_parameter_byte(2, 0, 4), 4.0);  // Adam, nothing sharded
  // ZeRO over 4 replicas: a quarter of Adam's moments, the gradient shards besides the full
  // gradients; ZeRO-2 is the same at a pipeline's peak.
  EXPECT_DOUBLE_EQ(state_per_parameter_byte(2, 1, 4), 1.0 + 1.25 + 0.5);
  EXPECT_DOUBLE_EQ(state_per_parameter_byte(2, 2, 4), 1.0 + 1.25 + 0.5);

  // A tied embedding owned by block 0 and read by block 2: the stage without the owner keeps a
  // copy with its state.
  std::vector<BlockProfile> blocks(3);
  for (auto& b : blocks) {
    b.forward_seconds = 1;
    b.parameter_bytes = 100;
    b.buffer_bytes = 10;
  }
  blocks[2].tied_owner = 0;
  blocks[2].tied_parameter_bytes = 40;
  PartitionOptions options;
  options.in_flight = std::vector<int>(2, 1);
  options.state_per_parameter_byte = state_per_parameter_byte(2, 0, 2);
  Partition p = evaluate_split(blocks, {1, 2}, options);
  EXPECT_DOUBLE_EQ(p.stages[0].memory_bytes, 100 * 4 + 10);
  EXPECT_DOUBLE_EQ(p.stages[1].memory_bytes, 2 * (100 * 4 + 10) + 40 * 4);
  options.state_per_parameter_byte = state_per_parameter_byte(2, 1, 2);  // ZeRO-1 over 2
  p = evaluate_split(blocks, {1, 2}, options);
  EXPECT_DOUBLE_EQ(p.stages[1].memory_bytes, 2 * (100 * 3.5 + 10) + 40 * 3.5);
}

TEST(Partitioner, ErrorsSayWhatWouldWork) {
  std::vector<BlockProfile> blocks(3);
  for (auto& b : blocks) {
    b.forward_seconds = 1;
    b.buffer_bytes = 1 << 20;  // kept as they are, whatever the optimizer
    b.activation_bytes = 1 << 20;
  }
  PartitionOptions options;
  options.in_flight = std::vector<int>{2, 1};
  options.memory_cap_bytes = 1.5 * (1 << 20);
  try {
    partition_blocks(blocks, options);
    FAIL() << "a cap no split fits was accepted";
  } catch (const ConfigError& e) {
    // Best split {1},{2}: stage 0 holds 1 + 2x1 = 3 MB, stage 1 2 + 2 = 4; {2},{1}: 2+4=6, 2.
    EXPECT_EQ(e.key(), "parallel.pipeline.memory_cap_mb");
    EXPECT_NEAR(std::stod(e.field("needed_bytes")), 4.0 * (1 << 20), 1.0) << e.what();
  }
  options.in_flight = std::vector<int>{1, 1, 1, 1};
  EXPECT_THROW(partition_blocks(blocks, options), ConfigError);  // 3 blocks, 4 stages
  options.in_flight = std::vector<int>{1, 1};
  options.memory_cap_bytes = 0;
  EXPECT_THROW(evaluate_split(blocks, {3, 0}, options), ConfigError);
  EXPECT_THROW(evaluate_split(blocks, {1, 1}, options), ConfigError);
  EXPECT_EQ(evaluate_split(blocks, {1, 2}, options).split(), "1,2");
}

}  // namespace
}  // namespace loom::parallel::pipeline
