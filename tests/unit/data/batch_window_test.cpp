#include "loom/data/batch_window.h"

#include <gtest/gtest.h>

#include <thread>

#include "loom/core/error.h"

namespace loom::data {
namespace {

using namespace std::chrono_literals;
using Delivery = BatchWindow::Delivery;

Batch batch_of(int64_t value) { return {at::full({1}, value, at::kLong), at::zeros({1}), {}}; }
int64_t value_of(const Batch& batch) { return batch.inputs.item<int64_t>(); }

BatchWindowOptions options_of(int64_t steps, std::chrono::milliseconds timeout = 10s) {
  BatchWindowOptions options;
  options.steps_per_epoch = steps;
  options.batch_timeout = timeout;
  options.waited_for = [](const OrderedWindow::Slot* slot) {
    return slot ? "producer " + std::to_string(slot->producer) + " was building it"
                : std::string("no producer took it");
  };
  return options;
}

LoaderStats counts_of(int64_t samples) {
  LoaderStats counts;
  counts.samples = samples;
  return counts;
}

TEST(BatchWindow, TheConsumerTakesInOrderWhateverOrderBatchesArriveIn) {
  BatchWindow window(options_of(3));
  window.move_to(0, 1);
  std::vector<BatchWindow::Claim> claims;
  for (int i = 0; i < 3; ++i) claims.push_back(*window.wait_claim(i, [] { return 3; }));
  EXPECT_EQ(claims[2].epoch, 1);  // on into the next epoch
  EXPECT_EQ(claims[2].step, 0);
  std::thread producers([&] {
    for (int i = 2; i >= 0; --i) {
      std::this_thread::sleep_for(10ms);
      window.deliver(claims[i], i, batch_of(i), nullptr, counts_of(10 + i));
    }
  });
  std::vector<int64_t> taken;
  taken.push_back(value_of(window.take(0, 1)));
  taken.push_back(value_of(window.take(0, 2)));
  taken.push_back(value_of(window.take(1, 0)));
  producers.join();
  EXPECT_EQ(taken, (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(window.stats().samples, 10 + 11 + 12);
  EXPECT_EQ(window.ready(), 0);
  EXPECT_THROW(window.take(1, 3), Error);  // past the epoch's three steps
}

TEST(BatchWindow, ProducersWaitUntilTheOwnerLetsThemAndStopEndsTheirWait) {
  BatchWindow window(options_of(100));
  int64_t ahead = 0;  // guarded by the window: the owner's prefetch depth
  std::thread producer([&] {
    while (auto claim = window.wait_claim(0, [&] { return ahead; })) {
      window.deliver(*claim, 0, batch_of(claim->step), nullptr, {});
    }
  });
  std::thread owner([&] {
    std::this_thread::sleep_for(50ms);
    EXPECT_EQ(window.ready(), 0);  // asked for, but the producer may not work yet
    window.update([&] { ahead = 2; });
  });
  EXPECT_EQ(value_of(window.take(0, 0)), 0);
  owner.join();
  // The producer fills the two positions ahead, and no more.
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (window.ready() < 2 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(1ms);
  }
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(window.ready(), 2);
  EXPECT_EQ(value_of(window.take(0, 1)), 1);
  window.stop();
  producer.join();  // wait_claim() returned nullopt
  EXPECT_TRUE(window.stopping());
  EXPECT_TRUE(window.stopped_within(10s));
}

TEST(BatchWindow, ATimeoutNamesWhoTheConsumerWaitedFor) {
  BatchWindow window(options_of(4, 50ms));
  const auto message_of_take = [&] {
    try {
      window.take(0, 0);
    } catch (const TimeoutError& e) {
      return std::string(e.what());
    }
    return std::string("no timeout");
  };
  EXPECT_EQ(message_of_take(),
            "loader: batch 0 of epoch 1 not ready after 0.05 s; no producer took it");
  ASSERT_TRUE(window.wait_claim(7, [] { return 1; }).has_value());
  EXPECT_EQ(message_of_take(),
            "loader: batch 0 of epoch 1 not ready after 0.05 s; producer 7 was building it");
}

TEST(BatchWindow, DeliveriesAreStoredStaleOrDuplicateAndErrorsReachTheConsumer) {
  BatchWindow window(options_of(4));
  window.move_to(0, 0);
  std::vector<Delivery> outcomes;
  const auto record = [&](Delivery outcome, LoaderStats& stats) {
    outcomes.push_back(outcome);
    stats.build_seconds += 1;  // the owner's times, counted with the window's
  };
  const auto lost = *window.wait_claim(3, [] { return 1; });
  window.give_back(lost, 3);  // a worker that failed
  const auto retry = *window.wait_claim(4, [] { return 1; });
  EXPECT_EQ(retry.position, lost.position);
  window.deliver(retry, 4, Batch{}, std::make_exception_ptr(DataError("bad shard")), {}, record);
  window.deliver(lost, 3, batch_of(9), nullptr, {}, record);  // its late answer
  const auto before_seek = *window.wait_claim(4, [] { return 2; });
  window.move_to(2, 0);
  window.deliver(before_seek, 4, batch_of(1), nullptr, {}, record);
  EXPECT_EQ(outcomes,
            (std::vector<Delivery>{Delivery::kStored, Delivery::kDuplicate, Delivery::kStale}));
  EXPECT_EQ(window.stats().build_seconds, 3);
  EXPECT_EQ(window.ready(), 0);  // the seek dropped the failed batch
  window.move_to(0, 0);
  const auto again = *window.wait_claim(4, [] { return 1; });
  window.deliver(again, 4, Batch{}, std::make_exception_ptr(DataError("bad shard")), {});
  EXPECT_THROW(window.take(0, 0), DataError);
}

}  // namespace
}  // namespace loom::data
