#include "loom/data/ordered_window.h"

#include <gtest/gtest.h>

namespace loom::data {
namespace {

Batch batch_of(int64_t value) { return {at::full({1}, value, at::kByte), {}, {}}; }

TEST(OrderedWindow, ProducersClaimTheLowestFreePositionsOnIntoTheNextEpoch) {
  OrderedWindow window(3);  // three steps an epoch
  EXPECT_FALSE(window.claim(0, 4).has_value());  // the consumer has not started
  window.move_to(0, 1);
  std::vector<std::pair<int64_t, int64_t>> claimed;
  while (auto c = window.claim(7, 4)) claimed.emplace_back(c->epoch, c->step);
  const std::vector<std::pair<int64_t, int64_t>> expected = {{0, 1}, {0, 2}, {1, 0}, {1, 1}};
  EXPECT_EQ(claimed, expected);
}

TEST(OrderedWindow, TheConsumerTakesInOrderAndFreesRoomAhead) {
  OrderedWindow window(2);
  window.move_to(0, 0);
  auto first = *window.claim(0, 2), second = *window.claim(1, 2);
  EXPECT_TRUE(window.deliver(second, 1, batch_of(2), nullptr, {}));
  EXPECT_FALSE(window.next_ready());  // the next one is (0, 0), still building
  EXPECT_EQ(window.ready(), 1);
  EXPECT_TRUE(window.deliver(first, 0, batch_of(1), nullptr, {}));
  ASSERT_TRUE(window.next_ready());
  EXPECT_EQ(window.take().batch.inputs.item<uint8_t>(), 1);
  auto third = window.claim(0, 2);  // room for (1, 0) now
  ASSERT_TRUE(third.has_value());
  EXPECT_EQ(third->epoch, 1);
  EXPECT_EQ(third->step, 0);
  EXPECT_EQ(window.take().batch.inputs.item<uint8_t>(), 2);
  // Moving to where the consumer stands keeps what was prepared.
  EXPECT_FALSE(window.move_to(1, 0));
  EXPECT_TRUE(window.deliver(*third, 0, batch_of(3), nullptr, {}));
  EXPECT_EQ(window.take().batch.inputs.item<uint8_t>(), 3);
}

TEST(OrderedWindow, AJumpDropsPreparedBatchesAndStaleClaims) {
  OrderedWindow window(4);
  window.move_to(0, 0);
  auto early = *window.claim(0, 2);
  EXPECT_TRUE(window.move_to(2, 1));  // set_epoch, or a resume elsewhere
  EXPECT_TRUE(window.stale(early));
  EXPECT_FALSE(window.deliver(early, 0, batch_of(1), nullptr, {}));
  EXPECT_EQ(window.ready(), 0);
  auto now = *window.claim(0, 2);
  EXPECT_EQ(now.epoch, 2);
  EXPECT_EQ(now.step, 1);
}

TEST(OrderedWindow, GivenBackPositionsAreClaimedAgainAndDuplicatesRefused) {
  OrderedWindow window(5);
  window.move_to(0, 0);
  auto lost = *window.claim(3, 1);
  EXPECT_FALSE(window.claim(4, 1).has_value());  // the only position is held
  window.give_back(lost, 3);
  auto retry = *window.claim(4, 1);
  EXPECT_EQ(retry.position, lost.position);
  EXPECT_TRUE(window.deliver(retry, 4, batch_of(9), nullptr, {}));
  EXPECT_FALSE(window.deliver(lost, 3, batch_of(9), nullptr, {}));  // the late answer: a duplicate
  EXPECT_FALSE(window.stale(lost));
  EXPECT_EQ(window.next_slot()->producer, 4);
}

TEST(OrderedWindow, NothingPastTheEpochLimitIsClaimed) {
  OrderedWindow window(2);
  window.set_epoch_limit(1);
  window.move_to(0, 1);
  EXPECT_TRUE(window.claim(0, 5).has_value());
  EXPECT_FALSE(window.claim(0, 5).has_value());  // (1, 0) is past the limit
  // ... unless the consumer stands there and waits for it.
  window.move_to(1, 0);
  EXPECT_FALSE(window.claim(0, 5).has_value());  // prepared (seek), not asked for
  EXPECT_FALSE(window.ask(1, 0));
  auto asked = window.claim(0, 5);
  ASSERT_TRUE(asked.has_value());
  EXPECT_EQ(asked->epoch, 1);
  EXPECT_FALSE(window.claim(0, 5).has_value());
}

}  // namespace
}  // namespace loom::data
