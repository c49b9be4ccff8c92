#include "loom/data/batcher.h"

#include <gtest/gtest.h>

#include "loom/core/error.h"
#include "loom/data/synthetic.h"

namespace loom::data {
namespace {

ImageSet numbered_set(int64_t n) {
  // Image i is filled with the value i, so a batch tells which samples it holds.
  ImageSet set;
  set.images = at::arange(n, at::kByte).view({n, 1, 1, 1}).expand({n, 4, 4, 1}).contiguous();
  set.labels = at::arange(n, at::kLong);
  set.classes = n;
  return set;
}

TEST(Batcher, BatchesFollowTheEpochOrder) {
  EpochOrder order(10, 5);
  Batcher batcher(numbered_set(10), 4, order, {}, 5, /*drop_last=*/true);
  EXPECT_EQ(batcher.steps_per_epoch(), 2);
  Batch b = batcher.batch(1, 1);
  ASSERT_EQ(b.labels.size(0), 4);
  for (int64_t i = 0; i < 4; ++i) {
    EXPECT_EQ(b.labels[i].item<int64_t>(), order.index_at(1, 4 + i));
    EXPECT_EQ(b.images[i][2][3][0].item<int64_t>(), b.labels[i].item<int64_t>());
  }
}

TEST(Batcher, ShardedBatchersSplitTheEpochWithEqualSteps) {
  EpochOrder order(21, 5);
  Batcher rank0(numbered_set(21), 4, order.shard(0, 2, EpochOrder::ShardMode::kDrop), {}, 5, true);
  Batcher rank1(numbered_set(21), 4, order.shard(1, 2, EpochOrder::ShardMode::kDrop), {}, 5, true);
  ASSERT_EQ(rank0.steps_per_epoch(), 2);  // 10 samples each, 2 full batches of 4
  ASSERT_EQ(rank1.steps_per_epoch(), 2);
  std::vector<int64_t> seen;
  for (auto* b : {&rank0, &rank1}) {
    for (int64_t s = 0; s < 2; ++s) {
      at::Tensor labels = b->batch(0, s).labels;
      seen.insert(seen.end(), labels.data_ptr<int64_t>(), labels.data_ptr<int64_t>() + 4);
    }
  }
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(std::adjacent_find(seen.begin(), seen.end()), seen.end());
}

TEST(Batcher, EvaluationKeepsTheShortLastBatch) {
  Batcher batcher(numbered_set(10), 4, EpochOrder(10, 0, false), {}, 0, /*drop_last=*/false);
  EXPECT_EQ(batcher.steps_per_epoch(), 3);
  EXPECT_EQ(batcher.batch(0, 2).labels.size(0), 2);
  EXPECT_THROW(batcher.batch(0, 3), Error);
}

TEST(Batcher, BatchLargerThanTheSetIsAConfigError) {
  EXPECT_THROW(Batcher(numbered_set(3), 4, EpochOrder(3, 0), {}, 0, true), ConfigError);
}

TEST(Batcher, AugmentationIsKeyedBySampleAndEpoch) {
  SyntheticSpec spec;
  spec.samples = 32;
  spec.height = spec.width = 12;
  ImageSet set = make_synthetic(spec);
  AugmentSpec augment;
  augment.enabled = true;
  Batcher a(set, 8, EpochOrder(32, 1), augment, 1, true);
  Batcher b(set, 8, EpochOrder(32, 1), augment, 1, true);
  Batcher plain(set, 8, EpochOrder(32, 1), {}, 1, true);
  EXPECT_TRUE(a.batch(2, 1).images.equal(b.batch(2, 1).images));
  EXPECT_FALSE(a.batch(2, 1).images.equal(plain.batch(2, 1).images));
  // Pixel mass is preserved up to the shifted-out border: flips and shifts move, never invent.
  at::Tensor augmented = a.batch(0, 0).images.to(at::kLong).sum();
  at::Tensor original = plain.batch(0, 0).images.to(at::kLong).sum();
  EXPECT_LE(augmented.item<int64_t>(), original.item<int64_t>());
}

TEST(Batcher, FlipAndShiftMovePixelsExactly) {
  // One 1x5 single-channel image with distinct values; with max_shift 0 only flips happen.
  ImageSet set;
  set.images = at::tensor({1, 2, 3, 4, 5}, at::kByte).view({1, 1, 5, 1});
  set.labels = at::zeros({1}, at::kLong);
  set.classes = 1;
  AugmentSpec flip_only{true, 0, true};
  Batcher batcher(set, 1, EpochOrder(1, 0), flip_only, 0, true);
  int flipped = 0;
  for (int64_t e = 0; e < 20; ++e) {
    at::Tensor row = batcher.batch(e, 0).images.view({5});
    if (row[0].item<int>() == 5) {
      EXPECT_TRUE(row.equal(at::tensor({5, 4, 3, 2, 1}, at::kByte)));
      ++flipped;
    } else {
      EXPECT_TRUE(row.equal(at::tensor({1, 2, 3, 4, 5}, at::kByte)));
    }
  }
  EXPECT_GT(flipped, 2);
  EXPECT_LT(flipped, 18);
}

}  // namespace
}  // namespace loom::data
