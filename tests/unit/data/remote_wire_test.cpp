// The pieces of the remote data service that need no network: the batch wire format and its
// checks, the fair build slots, and what a worker accepts of a trainer's configuration.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <mutex>
#include <thread>

#include "loom/core/error.h"
#include "loom/data/remote/batch_wire.h"
#include "loom/data/remote/data_service.pb.h"
#include "loom/data/remote/fair_slots.h"
#include "loom/data/remote/remote_config.h"
#include "tools/test_support.h"

namespace loom::data {
namespace {

Batch sample_batch(int64_t count) {
  Batch b;
  // Compressible but not constant: rows of a ramp.
  b.images =
      (at::arange(count * 8 * 6 * 3, at::kLong) % 97).to(at::kByte).reshape({count, 8, 6, 3});
  b.labels = at::arange(count, at::kLong) * 3;
  b.indices = at::arange(count, at::kLong) + 1000;
  return b;
}

BatchShape shape_for(int64_t epoch, int64_t step) {
  BatchShape s;
  s.epoch = epoch;
  s.step = step;
  s.max_samples = 5;
  s.height = 8;
  s.width = 6;
  s.channels = 3;
  return s;
}

remote::BatchReply packed(const Batch& batch, bool lz4) {
  LoaderStats tally;
  tally.samples = 5;
  tally.bad = {1, 0, 0, 0};
  remote::BatchReply reply;
  reply.set_epoch(2);
  reply.set_step(7);
  pack_batch(batch, tally, 0.25, lz4, reply);
  return reply;
}

TEST(BatchWire, RoundTripsRawAndLz4) {
  const Batch batch = sample_batch(4);
  for (bool lz4 : {false, true}) {
    remote::BatchReply reply = packed(batch, lz4);
    if (lz4) EXPECT_LT(reply.images().size(), static_cast<size_t>(batch.images.numel()));
    LoaderStats tally;
    const Batch got = unpack_batch(reply, lz4, shape_for(2, 7), tally);
    EXPECT_TRUE(got.images.equal(batch.images)) << "lz4 " << lz4;
    EXPECT_TRUE(got.labels.equal(batch.labels));
    EXPECT_TRUE(got.indices.equal(batch.indices));
    EXPECT_EQ(tally.samples, 5);
    EXPECT_EQ(tally.bad[0], 1);
    EXPECT_DOUBLE_EQ(tally.build_seconds, 0.25);
  }
}

TEST(BatchWire, RefusesAFlippedByteWrongShapeAndWrongPosition) {
  const Batch batch = sample_batch(4);
  auto expect_corrupt = [](remote::BatchReply reply, const BatchShape& shape, bool lz4,
                           const std::string& says) {
    LoaderStats tally;
    try {
      unpack_batch(reply, lz4, shape, tally);
      ADD_FAILURE() << "accepted a reply that should say: " << says;
    } catch (const CorruptBatch& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
    EXPECT_EQ(tally.samples, 0);  // nothing counted from a refused reply
  };
  remote::BatchReply flipped = packed(batch, false);
  (*flipped.mutable_images())[100] ^= 1;
  expect_corrupt(flipped, shape_for(2, 7), false, "CRC-32C does not match");
  remote::BatchReply flipped_label = packed(batch, false);
  (*flipped_label.mutable_labels())[0] ^= 1;
  expect_corrupt(flipped_label, shape_for(2, 7), false, "CRC-32C");
  remote::BatchReply lz4 = packed(batch, true);
  lz4.mutable_images()->resize(lz4.images().size() / 2);
  expect_corrupt(lz4, shape_for(2, 7), true, "LZ4 images do not decode");
  BatchShape other_size = shape_for(2, 7);
  other_size.width = 7;
  expect_corrupt(packed(batch, false), other_size, false, "expected at most 5 of 8x7x3");
  BatchShape fewer = shape_for(2, 7);
  fewer.max_samples = 3;
  expect_corrupt(packed(batch, false), fewer, false, "images are [4, 8, 6, 3]");
  expect_corrupt(packed(batch, false), shape_for(2, 8), false,
                 "the reply is for batch 7 of epoch 3");
}

TEST(FairSlots, ServesSessionsInTurnWhenTheyQueue) {
  FairSlots slots(1);
  const auto far = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  ASSERT_TRUE(slots.acquire("hold", far));
  std::mutex mutex;
  std::vector<std::string> order;
  std::vector<std::thread> waiters;
  std::atomic<int> queued{0};
  auto wait_for = [&](const std::string& session) {
    waiters.emplace_back([&, session] {
      ++queued;
      ASSERT_TRUE(slots.acquire(session, far));
      {
        std::lock_guard<std::mutex> lock(mutex);
        order.push_back(session);
      }
      slots.release();
    });
    // Queue them in this order: "a" four times first, then "b" twice.
    while (queued.load() < static_cast<int>(waiters.size())) std::this_thread::yield();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  };
  for (int i = 0; i < 4; ++i) wait_for("a");
  for (int i = 0; i < 2; ++i) wait_for("b");
  slots.release();
  for (auto& t : waiters) t.join();
  // "b" does not wait behind all of "a"'s requests.
  EXPECT_EQ(order, (std::vector<std::string>{"a", "b", "a", "b", "a", "a"}));
}

TEST(FairSlots, TimesOutAndStops) {
  FairSlots slots(1);
  const auto soon = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
  ASSERT_TRUE(slots.acquire("x", soon));
  EXPECT_FALSE(slots.acquire("y", soon));  // the only slot is held
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    slots.stop();
  });
  EXPECT_FALSE(slots.acquire("y", std::chrono::steady_clock::now() + std::chrono::seconds(30)));
  stopper.join();
  slots.release();
  EXPECT_FALSE(slots.acquire("z", std::chrono::steady_clock::now() + std::chrono::seconds(1)));
}

TEST(RemoteConfig, SendsOnlyTheSeedAndTheDataSection) {
  Config config = parse_config("", "test",
                               {"data=synthetic", "seed=7", "train.epochs=9",
                                "data.remote.workers=a:1,b:2", "data.batch_size=12"});
  ASSERT_EQ(config.data.remote.workers, (std::vector<std::string>{"a:1", "b:2"}));
  const std::string text = remote_config_text(config);
  EXPECT_EQ(text.find("epochs"), std::string::npos) << text;
  EXPECT_EQ(text.find("remote"), std::string::npos) << text;
  const Config back = parse_remote_config(text);
  EXPECT_EQ(back.seed, 7);
  EXPECT_EQ(back.data.batch_size, 12);
  EXPECT_EQ(back.data.source, "synthetic");
}

TEST(RemoteConfig, RefusesOtherKeysAndInvalidValuesNamingThem) {
  auto refusal = [](const std::string& text) {
    try {
      parse_remote_config(text);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(refusal("seed: 1\nmodel: {name: cnn}\n").find("config key 'model'"), std::string::npos);
  EXPECT_NE(refusal("data: {batch_size: 0}\n").find("config key 'data.batch_size'"),
            std::string::npos);
  EXPECT_NE(refusal("data: {remote: {workers: [a:1]}}\n").find("data.remote"), std::string::npos);
  EXPECT_NE(refusal("[1, 2]").find("not a mapping"), std::string::npos);
  EXPECT_NE(refusal("data: {bath_size: 3}").find("did you mean 'data.batch_size'"),
            std::string::npos);
}

TEST(RemoteConfig, DataPathsMustResolveInsideARoot) {
  test::TempDir dir;
  std::filesystem::create_directories(dir / "root/images");
  std::filesystem::create_directories(dir / "outside");
  std::filesystem::create_symlink(dir / "outside", dir / "root/escape");
  Config config = parse_config("", "test", {"data=image_folder"});
  const std::vector<std::string> roots = {dir / "root/"};
  config.data.path = dir / "root/images";
  EXPECT_NO_THROW(check_under_roots(config, roots));
  for (const std::string& path : {dir / "root/images/../../outside", dir / "root/escape",
                                  dir / "rootless", std::string("/etc")}) {
    config.data.path = path;
    try {
      check_under_roots(config, roots);
      ADD_FAILURE() << path << " was accepted";
    } catch (const DataError& e) {
      EXPECT_NE(std::string(e.what()).find("outside this worker's data roots"), std::string::npos);
    }
  }
  config.data.source = "synthetic";  // reads no files
  EXPECT_NO_THROW(check_under_roots(config, roots));
}

}  // namespace
}  // namespace loom::data
