#include "loom/parallel/bucket_plan.h"

#include <gtest/gtest.h>

namespace loom::parallel {
namespace {

std::vector<int> reverse_order(int n) {
  std::vector<int> order;
  for (int i = n - 1; i >= 0; --i) order.push_back(i);
  return order;
}

TEST(BucketPlan, FirstBucketSmallLaterOnesCapped) {
  // Six float gradients of 100 elements (400 bytes); first bucket 800 bytes, then 1200.
  std::vector<GradientInfo> gradients(6, GradientInfo{100, c10::ScalarType::Float});
  const auto plan = plan_buckets(gradients, reverse_order(6), BucketLimits{800, 1200});
  const std::vector<std::vector<int>> want = {{5, 4}, {3, 2, 1}, {0}};
  EXPECT_EQ(plan, want);
}

TEST(BucketPlan, OversizedGradientGetsItsOwnBucket) {
  std::vector<GradientInfo> gradients = {
      {10, c10::ScalarType::Float}, {10000, c10::ScalarType::Float}, {10, c10::ScalarType::Float}};
  const auto plan = plan_buckets(gradients, {0, 1, 2}, BucketLimits{100, 1000});
  const std::vector<std::vector<int>> want = {{0}, {1}, {2}};
  EXPECT_EQ(plan, want);
}

TEST(BucketPlan, ElementTypesNeverShareABucket) {
  std::vector<GradientInfo> gradients = {{10, c10::ScalarType::Float},
                                         {10, c10::ScalarType::BFloat16},
                                         {10, c10::ScalarType::Float},
                                         {10, c10::ScalarType::BFloat16}};
  const auto plan = plan_buckets(gradients, {0, 1, 2, 3}, BucketLimits{1 << 20, 1 << 20});
  const std::vector<std::vector<int>> want = {{0, 2}, {1, 3}};
  EXPECT_EQ(plan, want);
}

TEST(BucketPlan, FollowsTheGivenOrder) {
  std::vector<GradientInfo> gradients(4, GradientInfo{100, c10::ScalarType::Float});
  const auto plan = plan_buckets(gradients, {2, 0, 3, 1}, BucketLimits{800, 800});
  const std::vector<std::vector<int>> want = {{2, 0}, {3, 1}};
  EXPECT_EQ(plan, want);
}

}  // namespace
}  // namespace loom::parallel
