// Keyed dropout masks (models/draw_key.h): a sample's part of a mask depends on the sample, the
// block and the draw's number only, so micro-batches that hold the same samples in another
// arrangement (data-parallel replicas, accumulated micro-batches) draw the same rows.
#include "loom/models/draw_key.h"

#include <gtest/gtest.h>

namespace loom::models {
namespace {

SampleKeys epoch_keys(int64_t first, int64_t replicas, int64_t replica) {
  SampleKeys keys;
  keys.key = 42;
  keys.first = first;
  keys.replicas = replicas;
  keys.replica = replica;
  return keys;
}

at::Tensor mask_in_block(const SampleKeys& keys, int64_t block, int64_t rows) {
  const DrawKeyScope scope(keys);
  start_block_draws(block);
  return dropout_mask({rows, 3, 5}, 0.5, at::TensorOptions(at::kFloat));
}

TEST(DrawKey, ASamplesMaskIsTheSameInAnyArrangementOfTheBatch) {
  // One process: samples 0..3 in one micro-batch. Two replicas: replica 1 holds samples 1 and 3.
  const at::Tensor whole = mask_in_block(epoch_keys(0, 1, 0), 2, 4);
  const at::Tensor replica = mask_in_block(epoch_keys(0, 2, 1), 2, 2);
  EXPECT_TRUE(at::equal(replica[0], whole[1]));
  EXPECT_TRUE(at::equal(replica[1], whole[3]));
  // A second micro-batch of 2: samples 2 and 3.
  const at::Tensor second = mask_in_block(epoch_keys(2, 1, 0), 2, 2);
  EXPECT_TRUE(at::equal(second[0], whole[2]));
  // Values: 0 or 1 / (1 - p), both present.
  EXPECT_TRUE(at::logical_or(whole.eq(0), whole.eq(2)).all().item<bool>());
  EXPECT_GT(whole.eq(0).sum().item<int64_t>(), 0);
  EXPECT_GT(whole.eq(2).sum().item<int64_t>(), 0);
}

TEST(DrawKey, KeepsOneMinusPOfTheElements) {
  const DrawKeyScope scope(epoch_keys(0, 1, 0));
  for (const double p : {0.1, 0.5}) {
    start_block_draws(0);
    const at::Tensor mask = dropout_mask({8, 256, 512}, p, at::TensorOptions(at::kFloat));
    const double kept = mask.ne(0).to(at::kDouble).mean().item<double>();
    EXPECT_NEAR(kept, 1 - p, 0.003) << p;  // 1M elements: a standard deviation of 0.0005
    EXPECT_NEAR(mask.max().item<float>(), 1 / (1 - p), 1e-6);
    // And alike in every sample, every row of the mask a different draw.
    EXPECT_NEAR(mask[7].ne(0).to(at::kDouble).mean().item<double>(), 1 - p, 0.01);
    EXPECT_FALSE(at::equal(mask[0], mask[1]));
  }
}

TEST(DrawKey, BlocksAndDrawsWithinABlockDrawApart) {
  const SampleKeys keys = epoch_keys(0, 1, 0);
  EXPECT_FALSE(at::equal(mask_in_block(keys, 0, 4), mask_in_block(keys, 1, 4)));
  const DrawKeyScope scope(keys);
  start_block_draws(0);
  const at::Tensor first = dropout_mask({4, 3, 5}, 0.5, at::TensorOptions(at::kFloat));
  const at::Tensor second = dropout_mask({4, 3, 5}, 0.5, at::TensorOptions(at::kFloat));
  EXPECT_FALSE(at::equal(first, second));
  // The block again: the same draws in the same order.
  start_block_draws(0);
  EXPECT_TRUE(at::equal(dropout_mask({4, 3, 5}, 0.5, at::TensorOptions(at::kFloat)), first));
}

TEST(DrawKey, WithoutAScopeMasksComeFromTheDefaultGenerator) {
  EXPECT_FALSE(DrawKeyScope::state().samples.has_value());
  at::manual_seed(7);
  const at::Tensor a = dropout_mask({4, 8}, 0.5, at::TensorOptions(at::kFloat));
  at::manual_seed(7);
  const at::Tensor b = at::dropout(at::ones({4, 8}), 0.5, /*train=*/true);
  EXPECT_TRUE(at::equal(a, b));
  // A scope ends with its state restored.
  {
    const DrawKeyScope scope(epoch_keys(0, 1, 0));
    EXPECT_TRUE(DrawKeyScope::state().samples.has_value());
  }
  EXPECT_FALSE(DrawKeyScope::state().samples.has_value());
}

// What a GPU runs: the mask by tensor operations, here on the CPU, against SplitMix64 element by
// element (streams with the top bit set and clear: int64 arithmetic must act as uint64's).
TEST(DrawKey, TensorOperationsDrawTheSameMaskAsTheLoop) {
  const std::vector<uint64_t> streams = {hash_key({1}), hash_key({2}), 0xfedcba9876543210ULL, 0,
                                         ~uint64_t{0}};
  constexpr int64_t kPerRow = 777;
  const double p = 0.3;
  const auto kept_below = static_cast<uint64_t>((1.0 - p) * (1 << 24));
  const auto kept = static_cast<float>(1.0 / (1.0 - p));
  const at::Tensor mask = keyed_mask_with_tensor_ops(streams, kPerRow, kept_below, kept, at::kCPU);
  ASSERT_EQ(mask.sizes(), (at::IntArrayRef{5, kPerRow}));
  at::Tensor expected = at::empty({5, kPerRow});
  for (int64_t r = 0; r < 5; ++r) {
    for (int64_t j = 0; j < kPerRow; ++j) {
      const uint64_t bits = mix64(streams[r] + static_cast<uint64_t>(j) * 0x9e3779b97f4a7c15ULL);
      expected[r][j] = (bits >> 40) < kept_below ? kept : 0.0f;
    }
  }
  EXPECT_TRUE(at::equal(mask, expected));
  // About 1 - p of the elements kept.
  EXPECT_NEAR(mask.ne(0).to(at::kDouble).mean().item<double>(), 1 - p, 0.03);
}

}  // namespace
}  // namespace loom::models
