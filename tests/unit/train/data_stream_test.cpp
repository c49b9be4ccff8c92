// DataStream: the training batches with a cursor, against the loader it wraps.
#include "loom/train/data_stream.h"

#include <gtest/gtest.h>

#include "loom/core/config.h"
#include "loom/core/error.h"
#include "loom/train/train_data.h"

namespace loom::train {
namespace {

// 100 synthetic 8x8 images in batches of 16: 6 batches an epoch (the last 4 samples dropped).
Config synthetic_config() {
  return parse_config("", "test",
                      {"data=synthetic", "data.image_size=8", "data.train_samples=100",
                       "data.test_samples=16", "data.batch_size=16", "data.augment=true"});
}

DataStreamOptions raw() {
  DataStreamOptions o;
  o.normalize = false;
  o.usable_cores = 2;
  return o;
}

TEST(DataStream, GivesTheLoadersBatchesThenEndsTheEpochAndGoesOnWithTheNext) {
  const Config config = synthetic_config();
  TrainData reference = load_train_data(config, config.data.batch_size, 2);
  DataStream stream(config, raw());
  ASSERT_EQ(stream.steps_per_epoch(), 6);
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    for (int64_t step = 0; step < 6; ++step) {
      auto batch = stream.next();
      ASSERT_TRUE(batch.has_value()) << epoch << " " << step;
      EXPECT_EQ(batch->epoch, epoch);
      EXPECT_EQ(batch->step, step);
      EXPECT_TRUE(batch->inputs.equal(reference.train->batch(epoch, step).inputs));
      EXPECT_TRUE(batch->targets.equal(reference.train->batch(epoch, step).targets));
    }
    EXPECT_EQ(stream.state().epoch, epoch + 1);  // the end reads as the next epoch's start
    EXPECT_EQ(stream.state().step, 0);
    EXPECT_FALSE(stream.next().has_value());
    EXPECT_EQ(stream.epoch(), epoch + 1);
  }
}

TEST(DataStream, RestoresMidEpochAndKeepsThePositionWhenTheSameEpochIsSet) {
  const Config config = synthetic_config();
  DataStream first(config, raw());
  for (int i = 0; i < 3; ++i) first.next();
  const data::LoaderState saved = first.state();
  const at::Tensor expected = first.next()->inputs;

  DataStream second(config, raw());
  second.restore(saved);
  second.set_epoch(0);  // already in epoch 0: the restored step stays
  EXPECT_EQ(second.step(), 3);
  EXPECT_TRUE(second.next()->inputs.equal(expected));
  second.set_epoch(1);
  EXPECT_EQ(second.step(), 0);

  DataStream other(parse_config("", "test",
                                {"data=synthetic", "data.image_size=8", "data.train_samples=100",
                                 "data.batch_size=16", "seed=5"}),
                   raw());
  EXPECT_THROW(other.restore(saved), DataError);
  data::LoaderState outside = saved;
  outside.step = 6;
  EXPECT_THROW(second.restore(outside), DataError);
}

TEST(DataStream, NormalisesToTheAskedTypeAndLayout) {
  DataStreamOptions o;
  o.usable_cores = 2;
  o.dtype = at::kBFloat16;
  o.channels_last = true;
  DataStream stream(synthetic_config(), o);
  const auto batch = stream.next();
  EXPECT_EQ(batch->inputs.scalar_type(), at::kBFloat16);
  EXPECT_EQ(batch->inputs.sizes(), (at::IntArrayRef{16, 3, 8, 8}));
  EXPECT_TRUE(batch->inputs.is_contiguous(at::MemoryFormat::ChannelsLast));
  EXPECT_THROW(parse_stream_dtype("int8", "dtype"), ConfigError);
  o.rank = 1;  // of a world of 1
  EXPECT_THROW(DataStream(synthetic_config(), o), ConfigError);
}

}  // namespace
}  // namespace loom::train
