// RemoteBatchSource against a real DataWorker on loopback (in this process): whatever the worker
// does (serves, stops, corrupts, refuses), every batch equals the one a local loader builds.
#include "loom/data/remote/remote_batch_source.h"

#include <gtest/gtest.h>

#include <functional>
#include <thread>

#include "loom/core/config.h"
#include "loom/data/configured_loaders.h"
#include "loom/data/remote/data_worker.h"
#include "loom/data/remote/remote_config.h"
#include "tools/test_support.h"

namespace loom::data {
namespace {

Config synthetic_config() {
  return parse_config("", "test",
                      {"data=synthetic", "data.image_size=12", "data.train_samples=96",
                       "data.batch_size=8", "data.augment=true", "seed=5"});
}

DataWorkerOptions worker_options(const std::string& root) {
  DataWorkerOptions o;
  o.listen = "127.0.0.1:0";
  o.data_roots = {root};
  o.threads = 2;
  return o;
}

RemoteSourceOptions source_options(const Config& config, int port, int local_threads) {
  RemoteSourceOptions o;
  o.workers = {"127.0.0.1:" + std::to_string(port)};
  o.local_threads = local_threads;
  o.fallback_threads = 1;
  o.reconnect_every = std::chrono::milliseconds(100);
  o.connection.timeout = std::chrono::milliseconds(5000);
  o.connection.client = "remote_batch_source_test";
  o.connection.config = remote_config_text(config, config.data.batch_size);
  return o;
}

std::unique_ptr<Loader> local_loader(const Config& config, int rank = 0, int world = 1) {
  return make_loaders(config, config.data.batch_size, 1, rank, world, false, false).train;
}

// Every batch of `epochs` epochs from `source` equals the reference loader's; `after_batch`
// runs after each one. The source is told, as the trainer tells it, that no epoch comes after
// them, so that it prepares nothing of the next (the tests count delivered batches).
void expect_same_batches(BatchSource& source, const LocalBatchSource& reference, int epochs,
                         const std::function<void(int)>& after_batch = {}) {
  source.set_epoch_limit(epochs);
  int taken = 0;
  for (int64_t epoch = 0; epoch < epochs; ++epoch) {
    for (int64_t step = 0; step < reference.steps_per_epoch(); ++step) {
      const Batch got = source.batch(epoch, step);
      const Batch want = reference.build_batch(epoch, step);
      ASSERT_TRUE(got.inputs.equal(want.inputs)) << "epoch " << epoch << " step " << step;
      ASSERT_TRUE(got.targets.equal(want.targets));
      ASSERT_TRUE(got.indices.equal(want.indices));
      if (after_batch) after_batch(++taken);
    }
  }
}

TEST(RemoteBatchSource, WorkerBatchesEqualLocalOnes) {
  test::TempDir root;
  const Config config = synthetic_config();
  DataWorker worker(worker_options(root.path()));
  RemoteBatchSource source(local_loader(config), source_options(config, worker.port(), 0));
  auto reference = local_loader(config);
  expect_same_batches(source, *reference, 2);
  const auto stats = source.worker_stats();
  ASSERT_EQ(stats.size(), 1u);
  EXPECT_EQ(stats[0].state, "up");
  EXPECT_EQ(stats[0].batches, 2 * reference->steps_per_epoch());        // no local producer
  EXPECT_GT(source.worker_stats()[0].up_seconds, stats[0].up_seconds);  // still up
  EXPECT_EQ(source.local_batches(), 0);
  EXPECT_GT(stats[0].bytes, 2 * reference->steps_per_epoch() * 8 * 12 * 12 * 3);
  EXPECT_EQ(source.stats().samples, 2 * reference->steps_per_epoch() * 8);
}

TEST(RemoteBatchSource, ShardsOfOtherRanksAndLz4AreTheSame) {
  test::TempDir root;
  const Config config = synthetic_config();
  DataWorker worker(worker_options(root.path()));
  RemoteSourceOptions options = source_options(config, worker.port(), 0);
  options.connection.rank = 1;
  options.connection.world = 3;
  options.connection.lz4 = true;
  RemoteBatchSource source(local_loader(config, 1, 3), options);
  expect_same_batches(source, *local_loader(config, 1, 3), 1);
  EXPECT_EQ(source.worker_stats()[0].batches, source.steps_per_epoch());
}

TEST(RemoteBatchSource, AWorkerThatStopsMidEpochLeavesItsBatchesToLocalThreads) {
  test::TempDir root;
  const Config config = synthetic_config();
  auto worker = std::make_unique<DataWorker>(worker_options(root.path()));
  RemoteBatchSource source(local_loader(config), source_options(config, worker->port(), 0));
  expect_same_batches(source, *local_loader(config), 2, [&](int taken) {
    if (taken == 5) worker->shutdown(std::chrono::milliseconds(0));
  });
  const auto stats = source.worker_stats();
  EXPECT_EQ(stats[0].state, "down");
  EXPECT_GE(stats[0].failures, 1);
  EXPECT_GT(source.local_batches(), 0);
  EXPECT_EQ(stats[0].batches + source.local_batches(), 2 * source.steps_per_epoch());
  // Its time up ended when it went down: the advisor's rate per worker counts only that time.
  EXPECT_GT(stats[0].up_seconds, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(source.worker_stats()[0].up_seconds, stats[0].up_seconds);
}

TEST(RemoteBatchSource, AWorkerStartedLaterJoins) {
  test::TempDir root;
  const Config config = synthetic_config();
  // Find a free port, then leave it free until the worker starts on it.
  int port = 0;
  {
    DataWorker probe(worker_options(root.path()));
    port = probe.port();
  }
  RemoteBatchSource source(local_loader(config), source_options(config, port, 0));
  EXPECT_EQ(source.worker_stats()[0].state, "down");
  DataWorkerOptions late = worker_options(root.path());
  late.listen = "127.0.0.1:" + std::to_string(port);
  DataWorker worker(late);
  for (int i = 0; i < 100 && source.worker_stats()[0].state != "up"; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(source.worker_stats()[0].state, "up");
  expect_same_batches(source, *local_loader(config), 1);
  EXPECT_GT(source.worker_stats()[0].batches, 0);
}

TEST(RemoteBatchSource, CorruptedBatchesAreAskedForAgain) {
  test::TempDir root;
  const Config config = synthetic_config();
  DataWorkerOptions o = worker_options(root.path());
  o.corrupt_every = 3;
  DataWorker worker(o);
  RemoteBatchSource source(local_loader(config), source_options(config, worker.port(), 0));
  expect_same_batches(source, *local_loader(config), 1);
  const auto stats = source.worker_stats();
  EXPECT_GE(stats[0].crc_mismatches, source.steps_per_epoch() / 3 - 1);
  EXPECT_EQ(stats[0].batches, source.steps_per_epoch());
}

TEST(RemoteBatchSource, AWrongTokenIsRefusedAndTheRunGoesOnLocally) {
  test::TempDir root;
  const Config config = synthetic_config();
  DataWorkerOptions o = worker_options(root.path());
  o.token = "right";
  DataWorker worker(o);
  for (const std::string token : {"wrong", ""}) {
    RemoteSourceOptions options = source_options(config, worker.port(), 0);
    options.connection.token = token;
    RemoteBatchSource source(local_loader(config), options);
    const auto stats = source.worker_stats();
    EXPECT_EQ(stats[0].state, "refused");
    EXPECT_EQ(source.refusal_fields(0)["problem"], token.empty() ? "token_required" : "token")
        << stats[0].last_error;
    expect_same_batches(source, *local_loader(config), 1);
    EXPECT_EQ(source.local_batches(), source.steps_per_epoch());
  }
  RemoteSourceOptions options = source_options(config, worker.port(), 0);
  options.connection.token = "right";
  RemoteBatchSource source(local_loader(config), options);
  EXPECT_EQ(source.worker_stats()[0].state, "up");
}

TEST(RemoteBatchSource, DataOutsideTheWorkersRootsIsRefused) {
  const char* fashion = std::getenv("LOOM_FASHION_MNIST_DIR");
  Config config = parse_config("", "test", {"data=fashion_mnist", "data.batch_size=4096"});
  if (!fashion && config.data.path.empty()) GTEST_SKIP() << "no Fashion-MNIST path configured";
  std::unique_ptr<Loader> local;
  try {
    local = local_loader(config);
  } catch (const DataError& e) {
    GTEST_SKIP() << "Fashion-MNIST is not installed: " << e.what();
  }
  test::TempDir root;
  DataWorker worker(worker_options(root.path()));
  RemoteBatchSource source(std::move(local), source_options(config, worker.port(), 0));
  const auto stats = source.worker_stats();
  EXPECT_EQ(stats[0].state, "refused");
  // The worker's refusal keeps its fields across the wire.
  ErrorFields refusal = source.refusal_fields(0);
  EXPECT_EQ(refusal["problem"], "outside_roots") << stats[0].last_error;
  EXPECT_EQ(refusal["key"], "data.path");
}

TEST(RemoteBatchSource, AWorkerWithOtherDataIsRefused) {
  test::TempDir root;
  const Config config = synthetic_config();
  Config other = config;
  other.data.train_samples = 104;  // one more batch per epoch
  DataWorker worker(worker_options(root.path()));
  RemoteSourceOptions options = source_options(config, worker.port(), 0);
  options.connection.config = remote_config_text(other, other.data.batch_size);
  RemoteBatchSource source(local_loader(config), options);
  EXPECT_EQ(source.worker_stats()[0].state, "refused");
  ErrorFields refusal = source.refusal_fields(0);
  EXPECT_EQ(refusal["problem"], "data_differs") << source.worker_stats()[0].last_error;
  EXPECT_EQ(refusal["samples"], "104");
  EXPECT_EQ(refusal["expected_samples"], std::to_string(config.data.train_samples));
}

}  // namespace
}  // namespace loom::data
