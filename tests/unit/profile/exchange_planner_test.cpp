// The ring-or-servers arithmetic (BytePS, OSDI'20) as `loom plan` shows it.
#include "loom/profile/exchange_planner.h"

#include <gtest/gtest.h>

#include "loom/core/error.h"

namespace loom::profile {
namespace {

TEST(ExchangePlanner, FourWorkersNeedThreeServersToBeatTheRing) {
  // ResNet-18's 46.8 MB over 1 Gbit/s links: M/B = 0.3744 s.
  const auto plan = plan_exchange(46.8e6, 4, 125e6, {1, 2, 3, 4});
  EXPECT_NEAR(plan.ring_seconds, 1.5 * 0.3744, 1e-9);
  EXPECT_NEAR(plan.break_even_servers, 16.0 / 6, 1e-12);
  ASSERT_EQ(plan.options.size(), 4u);
  EXPECT_NEAR(plan.options[0].seconds, 4 * 0.3744, 1e-9);  // one server carries everything
  EXPECT_NEAR(plan.options[1].seconds, 2 * 0.3744, 1e-9);
  EXPECT_NEAR(plan.options[2].seconds, 4 * 0.3744 / 3, 1e-9);
  EXPECT_NEAR(plan.options[3].seconds, 0.3744, 1e-9);  // each worker's own link binds
  EXPECT_EQ(plan.best_servers, 4);
  EXPECT_EQ(plan.ring_arithmetic, "2(n-1)/n*M/B = 2*3/4*0.3744 = 0.5616 s");
  EXPECT_EQ(plan.options[1].arithmetic, "max(M/B, n*M/(k*B)) = max(0.3744, 4*0.3744/2) = 0.7488 s");
}

TEST(ExchangePlanner, TwoWorkersCanAtBestTie) {
  const auto plan = plan_exchange(1e6, 2, 1e6, {1, 2, 8});
  EXPECT_DOUBLE_EQ(plan.ring_seconds, 1.0);
  EXPECT_DOUBLE_EQ(plan.options[1].seconds, 1.0);
  EXPECT_DOUBLE_EQ(plan.options[2].seconds, 1.0);
  EXPECT_EQ(plan.best_servers, 0);  // a tie keeps the ring
}

TEST(ExchangePlanner, ImpossibleInputsAreConfigErrors) {
  EXPECT_THROW(plan_exchange(0, 2, 1e6, {1}), ConfigError);
  EXPECT_THROW(plan_exchange(1e6, 0, 1e6, {1}), ConfigError);
  EXPECT_THROW(plan_exchange(1e6, 2, 0, {1}), ConfigError);
  EXPECT_THROW(plan_exchange(1e6, 2, 1e6, {0}), ConfigError);
}

}  // namespace
}  // namespace loom::profile
