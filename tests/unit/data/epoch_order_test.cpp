#include "loom/data/epoch_order.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <vector>

namespace loom::data {
namespace {

std::vector<int64_t> epoch(const EpochOrder& order, int64_t e) {
  std::vector<int64_t> out;
  for (int64_t p = 0; p < order.size(); ++p) out.push_back(order.index_at(e, p));
  return out;
}

TEST(EpochOrder, IsAPermutationForManySizes) {
  for (int64_t size : {1, 2, 3, 7, 64, 100, 1000, 4097}) {
    EpochOrder order(size, 42);
    std::vector<int64_t> seen = epoch(order, 0);
    std::sort(seen.begin(), seen.end());
    std::vector<int64_t> expected(size);
    std::iota(expected.begin(), expected.end(), 0);
    EXPECT_EQ(seen, expected) << "size " << size;
  }
}

TEST(EpochOrder, DependsOnlyOnSeedEpochAndPosition) {
  EpochOrder a(1000, 7), b(1000, 7), other_seed(1000, 8);
  EXPECT_EQ(epoch(a, 3), epoch(b, 3));
  EXPECT_NE(epoch(a, 3), epoch(a, 4));
  EXPECT_NE(epoch(a, 3), epoch(other_seed, 3));
  // Random access gives what a full pass gives: resuming at a position needs no replay.
  EXPECT_EQ(a.index_at(3, 517), epoch(b, 3)[517]);
}

TEST(EpochOrder, ShuffleOffIsTheIdentity) {
  EpochOrder order(10, 1, /*shuffle=*/false);
  for (int64_t p = 0; p < 10; ++p) EXPECT_EQ(order.index_at(5, p), p);
}

TEST(EpochOrder, ShuffleLooksRandom) {
  EpochOrder order(10000, 3);
  std::vector<int64_t> e = epoch(order, 0);
  int64_t fixed_points = 0;
  for (int64_t i = 0; i < 10000; ++i) fixed_points += e[i] == i;
  EXPECT_LT(fixed_points, 10);  // a random permutation has about one
  // First half of positions should draw from both halves of the indices.
  int64_t low = std::count_if(e.begin(), e.begin() + 5000, [](int64_t x) { return x < 5000; });
  EXPECT_NEAR(low, 2500, 250);
}

TEST(EpochOrder, ShardsAreDisjointCoverTheEpochAndHaveEqualSizes) {
  for (int64_t size : {1000, 1001, 1003}) {
    const EpochOrder order(size, 11);
    for (int world : {1, 2, 3, 4}) {
      std::vector<int64_t> seen;
      for (int rank = 0; rank < world; ++rank) {
        EpochOrder shard = order.shard(rank, world, EpochOrder::ShardMode::kDrop);
        EXPECT_EQ(shard.size(), size / world);
        EXPECT_EQ(shard.total(), size);
        for (int64_t p = 0; p < shard.size(); ++p) seen.push_back(shard.index_at(2, p));
      }
      std::sort(seen.begin(), seen.end());
      EXPECT_EQ(std::adjacent_find(seen.begin(), seen.end()), seen.end()) << "overlap";
      EXPECT_EQ(static_cast<int64_t>(seen.size()), size - size % world);  // drop: the remainder
      // Each rank's share is its stride through the one epoch order, so shards of one epoch are
      // the unsharded epoch dealt out.
      EpochOrder second = order.shard(1 % world, world, EpochOrder::ShardMode::kDrop);
      EXPECT_EQ(second.index_at(2, 0), order.index_at(2, 1 % world));
    }
  }
}

TEST(EpochOrder, PaddedShardsWrapToCoverEverySample) {
  const EpochOrder order(10, 4);
  std::vector<int64_t> seen;
  for (int rank = 0; rank < 4; ++rank) {
    EpochOrder shard = order.shard(rank, 4, EpochOrder::ShardMode::kPad);
    EXPECT_EQ(shard.size(), 3);  // ceil(10 / 4): every rank takes three steps of one sample
    for (int64_t p = 0; p < 3; ++p) seen.push_back(shard.index_at(0, p));
  }
  std::vector<int64_t> unique = seen;
  std::sort(unique.begin(), unique.end());
  unique.erase(std::unique(unique.begin(), unique.end()), unique.end());
  EXPECT_EQ(unique.size(), 10u);  // all covered
  EXPECT_EQ(seen.size(), 12u);    // two repeated to even out the last round
  EXPECT_THROW(order.shard(4, 4, EpochOrder::ShardMode::kPad), std::exception);
  EXPECT_THROW(EpochOrder(3, 0).shard(0, 4, EpochOrder::ShardMode::kDrop), std::exception);
}

// Evaluation: every sample exactly once over the ranks, parts differing by at most one.
TEST(EpochOrder, ExactShardsVisitEverySampleOnce) {
  for (int world : {1, 2, 3, 4}) {
    const EpochOrder order(10, 4, false);
    std::vector<int64_t> seen;
    for (int rank = 0; rank < world; ++rank) {
      EpochOrder shard = order.shard(rank, world, EpochOrder::ShardMode::kExact);
      EXPECT_EQ(shard.size(), 10 / world + (rank < 10 % world)) << rank << " of " << world;
      for (int64_t p = 0; p < shard.size(); ++p) seen.push_back(shard.index_at(0, p));
    }
    std::sort(seen.begin(), seen.end());
    std::vector<int64_t> all(10);
    std::iota(all.begin(), all.end(), 0);
    EXPECT_EQ(seen, all) << "world " << world;
  }
}

TEST(EpochOrder, RejectsOutOfRangePositions) {
  EpochOrder order(10, 1);
  EXPECT_THROW(order.index_at(0, 10), std::exception);
  EXPECT_THROW(order.index_at(0, -1), std::exception);
  EXPECT_THROW(EpochOrder(0, 1), std::exception);
}

}  // namespace
}  // namespace loom::data
