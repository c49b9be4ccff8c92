// The pieces of the remote data service that need no network: the batch wire format and its
// checks, the fair queue of build requests, and what a worker accepts of a trainer's configuration.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <thread>

#include "loom/core/error.h"
#include "loom/data/configured_loaders.h"
#include "loom/data/remote/batch_wire.h"
#include "loom/data/remote/data_service.pb.h"
#include "loom/data/remote/fair_queue.h"
#include "loom/data/remote/remote_config.h"
#include "tools/test_support.h"

namespace loom::data {
namespace {

Batch sample_batch(int64_t count) {
  Batch b;
  // Compressible but not constant: rows of a ramp.
  b.inputs =
      (at::arange(count * 8 * 6 * 3, at::kLong) % 97).to(at::kByte).reshape({count, 8, 6, 3});
  b.targets = at::arange(count, at::kLong) * 3;
  b.indices = at::arange(count, at::kLong) + 1000;
  return b;
}

BatchShape shape_for(int64_t epoch, int64_t step) {
  BatchShape s;
  s.epoch = epoch;
  s.step = step;
  s.layout.batch_size = 5;
  s.layout.input_dims = {8, 6, 3};
  return s;
}

// Token windows: int64 ids [B, T] and the next ones [B, T].
Batch token_batch(int64_t count, int64_t seq_len) {
  Batch b;
  const at::Tensor rows = at::arange(count * (seq_len + 1), at::kLong).reshape({count, -1}) * 7;
  b.inputs = rows.narrow(1, 0, seq_len).contiguous();
  b.targets = rows.narrow(1, 1, seq_len).contiguous();
  b.indices = at::arange(count, at::kLong) * 5;
  return b;
}

BatchShape token_shape(int64_t epoch, int64_t step, int64_t seq_len) {
  BatchShape s;
  s.epoch = epoch;
  s.step = step;
  s.layout.batch_size = 4;
  s.layout.input_dims = s.layout.target_dims = {seq_len};
  s.layout.input_dtype = at::kLong;
  return s;
}

std::vector<grpc::Slice> slices_of(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(buffer.Dump(&slices).ok());
  return slices;
}

// What gRPC does with the worker's buffer on the trainer's side: parse it as a BatchReply.
remote::BatchReply packed(const Batch& batch, bool lz4, bool flip_image_byte = false) {
  LoaderStats tally;
  tally.samples = 5;
  tally.bad = {1, 0, 0, 0};
  const grpc::ByteBuffer buffer = pack_batch(batch, 2, 7, tally, 0.25, lz4, flip_image_byte);
  std::string bytes;
  for (const grpc::Slice& s : slices_of(buffer)) {
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  EXPECT_EQ(bytes.size(), buffer.Length());
  remote::BatchReply reply;
  EXPECT_TRUE(reply.ParseFromString(bytes));
  return reply;
}

// A reply as protobuf itself serialises it (images among the other fields, not last), cut into
// slices of `piece` bytes, as gRPC may receive it.
grpc::ByteBuffer wire(const std::string& bytes, size_t piece = 7) {
  std::vector<grpc::Slice> slices;
  for (size_t at = 0; at < bytes.size(); at += piece) {
    slices.emplace_back(bytes.data() + at, std::min(piece, bytes.size() - at));
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}
grpc::ByteBuffer wire(const remote::BatchReply& reply) { return wire(reply.SerializeAsString()); }

TEST(BatchWire, SendsTheBatchOwnMemoryAndFramesItAsProtobufWould) {
  const Batch batch = sample_batch(4);
  // The hand-framed images field (after the others) parses as protobuf's own would.
  const remote::BatchReply reply = packed(batch, false);
  EXPECT_EQ(reply.epoch(), 2);
  EXPECT_EQ(reply.step(), 7);
  EXPECT_EQ(reply.inputs().size(), static_cast<size_t>(batch.inputs.numel()));

  // No copy: the last slice is the tensor's memory, and the tensor stays alive with it.
  grpc::ByteBuffer buffer;
  {
    Batch own = sample_batch(4);
    buffer = pack_batch(own, 0, 0, LoaderStats{}, 0, false);
    const std::vector<grpc::Slice> slices = slices_of(buffer);
    ASSERT_EQ(slices.size(), 2u);
    EXPECT_EQ(static_cast<const void*>(slices[1].begin()), own.inputs.data_ptr());
  }
  const std::vector<grpc::Slice> kept = slices_of(buffer);
  EXPECT_EQ(std::memcmp(kept[1].begin(), batch.inputs.data_ptr(), kept[1].size()), 0);

  // Damage for tests goes to a private copy: the batch itself is left as it was.
  const Batch shared = sample_batch(4);
  const remote::BatchReply damaged = packed(shared, false, true);
  EXPECT_TRUE(shared.inputs.equal(batch.inputs));
  LoaderStats tally;
  EXPECT_THROW(unpack_batch(wire(damaged), false, shape_for(2, 7), tally), CorruptBatch);
}

TEST(BatchWire, RoundTripsRawAndLz4) {
  const Batch batch = sample_batch(4);
  for (bool lz4 : {false, true}) {
    remote::BatchReply reply = packed(batch, lz4);
    if (lz4) {
      EXPECT_LT(reply.inputs().size(), static_cast<size_t>(batch.inputs.numel()));
    }
    LoaderStats tally;
    const Batch got = unpack_batch(wire(reply), lz4, shape_for(2, 7), tally);
    EXPECT_TRUE(got.inputs.equal(batch.inputs)) << "lz4 " << lz4;
    EXPECT_TRUE(got.targets.equal(batch.targets));
    EXPECT_TRUE(got.indices.equal(batch.indices));
    EXPECT_EQ(tally.samples, 5);
    EXPECT_EQ(tally.bad[0], 1);
    EXPECT_DOUBLE_EQ(tally.build_seconds, 0.25);
  }
}

TEST(BatchWire, RoundTripsTokenWindows) {
  const Batch batch = token_batch(3, 16);  // a short last batch: 3 of 4
  for (bool lz4 : {false, true}) {
    LoaderStats counts;
    counts.samples = 3;
    const grpc::ByteBuffer buffer = pack_batch(batch, 1, 2, counts, 0, lz4);
    LoaderStats tally;
    const Batch got = unpack_batch(buffer, lz4, token_shape(1, 2, 16), tally);
    EXPECT_EQ(got.inputs.scalar_type(), at::kLong);
    EXPECT_TRUE(got.inputs.equal(batch.inputs)) << "lz4 " << lz4;
    EXPECT_TRUE(got.targets.equal(batch.targets));
    EXPECT_TRUE(got.indices.equal(batch.indices));
    EXPECT_EQ(tally.samples, 3);
  }
  // Windows of another length than the trainer's are refused, saying both.
  LoaderStats tally;
  try {
    unpack_batch(pack_batch(batch, 1, 2, LoaderStats{}, 0, false), false, token_shape(1, 2, 8),
                 tally);
    ADD_FAILURE() << "accepted windows of 16 for 8";
  } catch (const CorruptBatch& e) {
    EXPECT_EQ(e.field("problem"), "input_shape") << e.what();
    EXPECT_EQ(e.field("value"), "[3, 16]");
    EXPECT_EQ(e.field("expected"), "[8]");
    EXPECT_EQ(e.field("max_samples"), "4");
  }
}

TEST(BatchWire, RefusesAFlippedByteWrongShapeAndWrongPosition) {
  const Batch batch = sample_batch(4);
  auto expect_corrupt = [](const grpc::ByteBuffer& reply, const BatchShape& shape, bool lz4,
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
  (*flipped.mutable_inputs())[100] ^= 1;
  expect_corrupt(wire(flipped), shape_for(2, 7), false, "CRC-32C does not match");
  remote::BatchReply flipped_label = packed(batch, false);
  (*flipped_label.mutable_targets())[0] ^= 1;
  expect_corrupt(wire(flipped_label), shape_for(2, 7), false, "CRC-32C");
  remote::BatchReply lz4 = packed(batch, true);
  lz4.mutable_inputs()->resize(lz4.inputs().size() / 2);
  expect_corrupt(wire(lz4), shape_for(2, 7), true, "LZ4 inputs do not decode");
  BatchShape other_size = shape_for(2, 7);
  other_size.layout.input_dims[1] = 7;
  expect_corrupt(wire(packed(batch, false)), other_size, false, "expected at most 5 of [8, 7, 3]");
  BatchShape fewer = shape_for(2, 7);
  fewer.layout.batch_size = 3;
  expect_corrupt(wire(packed(batch, false)), fewer, false, "inputs are [4, 8, 6, 3]");
  // Token ids where pixels were expected, and labels of another shape.
  expect_corrupt(wire(packed(token_batch(4, 6), false)), shape_for(2, 7), false,
                 "inputs are of type INT64, expected UINT8");
  remote::BatchReply two_labels = packed(batch, false);
  two_labels.add_target_shape(2);
  expect_corrupt(wire(two_labels), shape_for(2, 7), false, "targets are [4, 2]");
  expect_corrupt(wire(packed(batch, false)), shape_for(2, 8), false,
                 "the reply is for batch 7 of epoch 3");
  // Bytes that are not a well-formed reply at all.
  const std::string good = packed(batch, false).SerializeAsString();
  expect_corrupt(wire(good.substr(0, good.size() - 10)), shape_for(2, 7), false,
                 "runs past the end");
  expect_corrupt(wire(good + "\x22\x01x"), shape_for(2, 7), false, "comes twice");
  expect_corrupt(wire(good + "\x0f"), shape_for(2, 7), false, "wire type 7");
  expect_corrupt(wire(good + "\x08\xff"), shape_for(2, 7), false, "ends in the middle");
  expect_corrupt(wire(std::string(12, '\xff')), shape_for(2, 7), false, "malformed varint");
}

TEST(FairQueue, ServesSessionsInTurn) {
  FairQueue queue;
  std::vector<std::string> order;
  auto job = [&](const std::string& name) {
    return [&order, name](bool run) { order.push_back(run ? name : "dropped " + name); };
  };
  for (int i = 0; i < 4; ++i) queue.push("a", job("a" + std::to_string(i)));
  for (int i = 0; i < 2; ++i) queue.push("b", job("b" + std::to_string(i)));
  for (int i = 0; i < 5; ++i) (*queue.pop())(true);
  // "b" does not wait behind all of "a"'s requests; each session's own stay in order.
  EXPECT_EQ(order, (std::vector<std::string>{"a0", "b0", "a1", "b1", "a2"}));
  queue.stop();  // what is still queued is answered, not lost
  EXPECT_EQ(order.back(), "dropped a3");
  queue.push("c", job("c0"));  // after stop: answered at once
  EXPECT_EQ(order.back(), "dropped c0");
  EXPECT_FALSE(queue.pop().has_value());
}

TEST(FairQueue, StopWakesWaitingBuilders) {
  FairQueue queue;
  std::atomic<int> woke{0};
  std::vector<std::thread> builders;
  for (int i = 0; i < 3; ++i) {
    builders.emplace_back([&] {
      while (std::optional<FairQueue::Job> job = queue.pop()) (*job)(true);
      ++woke;
    });
  }
  std::atomic<int> ran{0};
  for (int i = 0; i < 10; ++i) queue.push(i % 2 ? "x" : "y", [&](bool run) { ran += run; });
  while (ran.load() < 10) std::this_thread::yield();
  queue.stop();
  for (auto& t : builders) t.join();
  EXPECT_EQ(woke.load(), 3);
}

TEST(RemoteConfig, SendsOnlyTheSeedAndTheDataSection) {
  Config config = parse_config("", "test",
                               {"data=synthetic", "seed=7", "train.epochs=9",
                                "data.remote.workers=a:1,b:2", "data.batch_size=12"});
  ASSERT_EQ(config.data.remote.workers, (std::vector<std::string>{"a:1", "b:2"}));
  const std::string text = remote_config_text(config, config.data.batch_size);
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
      return e;
    }
    return ConfigError("accepted", {{"problem", "accepted"}});
  };
  EXPECT_EQ(refusal("seed: 1\nmodel: {name: cnn}\n").key(), "model");
  EXPECT_EQ(refusal("seed: 1\nmodel: {name: cnn}\n").field("problem"), "not_accepted");
  EXPECT_EQ(refusal("data: {batch_size: 0}\n").key(), "data.batch_size");
  EXPECT_EQ(refusal("data: {remote: {workers: [a:1]}}\n").key(), "data.remote");
  EXPECT_EQ(refusal("[1, 2]").field("problem"), "not_mapping");
  EXPECT_EQ(refusal("data: [unclosed").field("problem"), "not_yaml");
  // An unknown key is refused by the configuration parser (core/config.cpp), with its suggestion.
  const ConfigError unknown = refusal("data: {bath_size: 3}");
  EXPECT_EQ(unknown.key(), "data.bath_size");
  EXPECT_EQ(unknown.field("problem"), "unknown_key");
  EXPECT_EQ(unknown.field("suggestion"), "data.batch_size");
}

TEST(RemoteConfig, AWorkerNeedsTheWindowLengthOfTokenData) {
  // The trainer sends the length its model implies (a GPT preset's context); without one the
  // worker refuses, naming the key, before it opens any file.
  Config config = parse_config("", "test", {"data=tokens", "data.path=/nonexistent"});
  try {
    make_training_batches(config, 8, 0, 1);
    ADD_FAILURE() << "opened token data without data.seq_len";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("data.seq_len"), std::string::npos) << e.what();
  }
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
      EXPECT_EQ(e.field("problem"), "outside_roots") << e.what();
      EXPECT_EQ(e.field("path"), path);
      EXPECT_EQ(e.field("key"), "data.path");
    }
  }
  config.data.source = "synthetic";  // reads no files
  EXPECT_NO_THROW(check_under_roots(config, roots));
}

}  // namespace
}  // namespace loom::data
