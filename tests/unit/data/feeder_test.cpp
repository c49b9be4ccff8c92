#include "loom/data/feeder.h"

#include <gtest/gtest.h>

#include "loom/core/device.h"
#include "loom/core/error.h"

namespace loom::data {
namespace {

TEST(Feeder, NormalisesPerChannelIntoTheRequestedLayout) {
  // 2 images of 3x2 pixels with 2 channels; 3 of 70x70 (more than one block of the fused
  // transpose) with 3.
  for (const std::vector<int64_t>& shape :
       {std::vector<int64_t>{2, 3, 2, 2}, std::vector<int64_t>{3, 70, 70, 3}}) {
    at::Tensor images = at::randint(0, 256, shape, at::kByte);
    ChannelStats stats{{0.5, 0.25, 0.4}, {0.2, 0.1, 0.3}};
    stats.mean.resize(static_cast<size_t>(shape[3]));
    stats.stddev.resize(static_cast<size_t>(shape[3]));
    for (auto format : {at::MemoryFormat::Contiguous, at::MemoryFormat::ChannelsLast}) {
      at::Tensor x = Feeder(stats, format).to_input(images);
      EXPECT_EQ(x.sizes(), (at::IntArrayRef{shape[0], shape[3], shape[1], shape[2]}));
      EXPECT_EQ(x.scalar_type(), at::kFloat);
      EXPECT_TRUE(x.is_contiguous(format));
      at::Tensor reference = images.permute({0, 3, 1, 2}).to(at::kDouble).div(255.0);
      for (int64_t c = 0; c < shape[3]; ++c) {
        reference.select(1, c).sub_(stats.mean[c]).div_(stats.stddev[c]);
      }
      EXPECT_TRUE(at::allclose(x.to(at::kDouble), reference, 1e-5, 1e-5));
    }
  }
}

// The device is checked up front: a CUDA feeder or pinned batches on a CPU-only LibTorch are
// clear errors, not a failure at the first batch; other device types are refused.
TEST(Feeder, DeviceIsCheckedAtConstruction) {
  ChannelStats stats{{0.5}, {0.2}};
  Feeder cpu(stats, at::MemoryFormat::ChannelsLast, at::kCPU);
  EXPECT_TRUE(cpu.device().is_cpu());
  at::Tensor images = at::randint(0, 256, {2, 3, 3, 1}, at::kByte);
  EXPECT_TRUE(
      cpu.to_input(images).equal(Feeder(stats, at::MemoryFormat::ChannelsLast).to_input(images)));
  EXPECT_TRUE(parse_feed_device("cpu", "--device").is_cpu());
  EXPECT_THROW(parse_feed_device("mps", "--device"), ConfigError);
  EXPECT_THROW(parse_feed_device("gpu", "--device"), ConfigError);
  if (cuda_availability().devices > 0) GTEST_SKIP() << "a GPU is here: the errors do not apply";
  EXPECT_TRUE(parse_feed_device("auto", "--device").is_cpu());
  try {
    Feeder(stats, at::MemoryFormat::ChannelsLast, at::Device("cuda:0"));
    FAIL() << "a CUDA feeder where no GPU can be used";
  } catch (const Error& e) {
    EXPECT_EQ(e.field("problem"), "no_cuda") << e.what();
    EXPECT_EQ(e.field("value"), "cuda:0");
  }
  EXPECT_THROW(parse_feed_device("cuda:1", "--device"), ConfigError);
}

TEST(ChannelStats, MatchesDirectComputation) {
  ImageSet set;
  set.images = at::tensor({0, 255, 255, 255}, at::kByte).view({2, 1, 1, 2});
  set.labels = at::zeros({2}, at::kLong);
  ChannelStats s = channel_stats(set);
  EXPECT_NEAR(s.mean[0], 0.5, 1e-12);
  EXPECT_NEAR(s.mean[1], 1.0, 1e-12);
  EXPECT_NEAR(s.stddev[0], std::sqrt(0.5), 1e-12);  // unbiased std of {0, 1}
}

}  // namespace
}  // namespace loom::data
