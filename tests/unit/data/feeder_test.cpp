#include "loom/data/feeder.h"

#include <gtest/gtest.h>

namespace loom::data {
namespace {

TEST(Feeder, NormalisesPerChannelIntoTheRequestedLayout) {
  // 2 images of 3x2 pixels, 2 channels.
  at::Tensor images = at::randint(0, 256, {2, 3, 2, 2}, at::kByte);
  ChannelStats stats{{0.5, 0.25}, {0.2, 0.1}};
  for (auto format : {at::MemoryFormat::Contiguous, at::MemoryFormat::ChannelsLast}) {
    at::Tensor x = Feeder(stats, format).to_input(images);
    EXPECT_EQ(x.sizes(), (at::IntArrayRef{2, 2, 3, 2}));
    EXPECT_EQ(x.scalar_type(), at::kFloat);
    EXPECT_TRUE(x.is_contiguous(format));
    at::Tensor reference = images.permute({0, 3, 1, 2}).to(at::kDouble).div(255.0);
    reference.select(1, 0).sub_(0.5).div_(0.2);
    reference.select(1, 1).sub_(0.25).div_(0.1);
    EXPECT_TRUE(at::allclose(x.to(at::kDouble), reference, 1e-5, 1e-5));
  }
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
