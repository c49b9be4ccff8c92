// The parameter servers' part plan: every gradient element goes to exactly one part, parts stay
// within the size limit, and every server receives the same bytes within one part.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <random>

#include "loom/core/error.h"
#include "loom/parallel/ps/part_plan.h"

namespace loom::parallel::ps {
namespace {

constexpr std::int64_t kMiB = 1 << 20;

void expect_valid(const PartPlan& plan, const std::vector<std::int64_t>& buffers,
                  std::int64_t part_bytes) {
  // Buffer by buffer, each covered from its start without gaps or overlaps.
  size_t next = 0;
  for (size_t b = 0; b < buffers.size(); ++b) {
    std::int64_t covered = 0, smallest = buffers[b], largest = 0;
    while (next < plan.parts.size() && plan.parts[next].buffer == static_cast<int>(b)) {
      const Part& p = plan.parts[next++];
      EXPECT_EQ(p.offset, covered) << "buffer " << b;
      EXPECT_GT(p.elements, 0);
      EXPECT_LE(p.elements * plan.element_bytes, part_bytes);
      EXPECT_GE(p.server, 0);
      EXPECT_LT(p.server, plan.servers);
      covered += p.elements;
      smallest = std::min(smallest, p.elements);
      largest = std::max(largest, p.elements);
    }
    EXPECT_EQ(covered, buffers[b]) << "buffer " << b;
    if (buffers[b] > 0) EXPECT_LE(largest - smallest, 1) << "buffer " << b;
  }
  EXPECT_EQ(next, plan.parts.size());
  const auto bytes = plan.server_bytes();
  const auto [low, high] = std::minmax_element(bytes.begin(), bytes.end());
  EXPECT_LE(*high - *low, plan.largest_part_bytes()) << plan.describe();
}

TEST(PartPlan, OneLargeBufferSpreadsOverEveryServerEqually) {
  // 100 MiB of fp32 gradients, 4 MiB parts, 4 servers: not 25 parts (7 / 6 / 6 / 6, one server
  // with 17% more than the others) but 28 parts of 3.6 MiB, 7 for every server.
  const std::vector<std::int64_t> buffers = {100 * kMiB / 4};
  const PartPlan plan = plan_parts(buffers, 4, 4 * kMiB, 4);
  ASSERT_EQ(plan.parts.size(), 28u);
  std::vector<int> per_server(4, 0);
  for (const Part& p : plan.parts) ++per_server[static_cast<size_t>(p.server)];
  EXPECT_EQ(per_server, (std::vector<int>{7, 7, 7, 7}));
  // Consecutive parts go to different servers, so a buffer's push runs on all of them at once.
  for (int i = 0; i < 4; ++i) EXPECT_EQ(plan.parts[static_cast<size_t>(i)].server, i);
  expect_valid(plan, buffers, 4 * kMiB);
  EXPECT_EQ(plan.describe(), "28 parts of <= 3.6 MB over 4 servers: 25.0 / 25.0 / 25.0 / 25.0 MB");
}

TEST(PartPlan, ManyBuffersLeaveTheServersWithinAnElementPerBuffer) {
  // Three buckets of 26, 20 and 0.6 MB (as many as ResNet-18's 46.8 MB of fp32 gradients) in
  // 1 MiB parts over 4 servers.
  const std::vector<std::int64_t> buffers = {6553600, 4980736, 153864};
  const PartPlan plan = plan_parts(buffers, 4, kMiB, 4);
  expect_valid(plan, buffers, kMiB);
  const auto bytes = plan.server_bytes();
  const auto [low, high] = std::minmax_element(bytes.begin(), bytes.end());
  EXPECT_LE(*high - *low, 4 * static_cast<std::int64_t>(buffers.size())) << plan.describe();
}

TEST(PartPlan, ABufferIsCutIntoEqualParts) {
  // 2.5 parts' worth over 2 servers: four parts of 0.625 (two for each server), not two full
  // ones and a half.
  const PartPlan plan = plan_parts({10}, 4, 16, 2);
  ASSERT_EQ(plan.parts.size(), 4u);
  EXPECT_EQ(plan.parts[0].elements, 3);
  EXPECT_EQ(plan.parts[1].elements, 3);
  EXPECT_EQ(plan.parts[2].elements, 2);
  EXPECT_EQ(plan.parts[3].elements, 2);
  // Over 3 servers three parts already are a multiple.
  EXPECT_EQ(plan_parts({10}, 4, 16, 3).parts.size(), 3u);
}

TEST(PartPlan, ABufferBelowOnePartIsStillSpreadOverEveryServer) {
  // The demo CNN's gradients after the first step: a 4 KB bucket and a 3.1 MB one, under 4 MB
  // parts and 2 servers. Whole buckets would put 3.1 MB on one server and 4 KB on the other.
  const std::vector<std::int64_t> buffers = {1000, 800000};
  const PartPlan plan = plan_parts(buffers, 4, 4 * kMiB, 2);
  ASSERT_EQ(plan.parts.size(), 3u) << plan.describe();
  EXPECT_EQ(plan.parts[1].elements, 400000);
  EXPECT_NE(plan.parts[1].server, plan.parts[2].server);
  const auto bytes = plan.server_bytes();
  EXPECT_LE(std::abs(bytes[0] - bytes[1]), 4000) << plan.describe();
  expect_valid(plan, buffers, 4 * kMiB);
  // Below the floor (two parts of 16 KB here) a buffer stays whole.
  EXPECT_EQ(plan_parts({8000}, 4, 4 * kMiB, 2).parts.size(), 1u);
  EXPECT_EQ(plan_parts({8000}, 4, 4 * kMiB, 2, 16 << 10).parts.size(), 1u);
  EXPECT_EQ(plan_parts({8192}, 4, 4 * kMiB, 2, 16 << 10).parts.size(), 2u);
}

TEST(PartPlan, RandomGradientsStayBalancedWithinOnePart) {
  std::mt19937 rng(7);
  for (int round = 0; round < 300; ++round) {
    std::vector<std::int64_t> buffers(std::uniform_int_distribution<int>(1, 12)(rng));
    for (auto& n : buffers) n = std::uniform_int_distribution<std::int64_t>(0, 5000)(rng);
    const int servers = std::uniform_int_distribution<int>(1, 6)(rng);
    const std::int64_t part_bytes = 4 * std::uniform_int_distribution<std::int64_t>(1, 900)(rng);
    SCOPED_TRACE("round " + std::to_string(round));
    expect_valid(plan_parts(buffers, 4, part_bytes, servers), buffers, part_bytes);
  }
}

TEST(PartPlan, ImpossibleLimitsAreErrors) {
  EXPECT_THROW(plan_parts({10}, 4, 16, 0), Error);
  EXPECT_THROW(plan_parts({10}, 4, 2, 1), Error);  // a part smaller than one element
  EXPECT_THROW(plan_parts({10}, 4, 16, 1, 0), Error);
  EXPECT_THROW(plan_parts({-1}, 4, 16, 1), Error);
  EXPECT_TRUE(plan_parts({0, 0}, 4, 16, 3).parts.empty());
}

}  // namespace
}  // namespace loom::parallel::ps
