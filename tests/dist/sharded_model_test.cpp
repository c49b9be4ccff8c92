// ZeRO-3 with ranks as threads: a model of three blocks, the last reading the first's matrix
// (tied, as a GPT's head reads its embedding), sharded over 2 ranks one bucket a block. Each rank
// trains on its half of every batch through ShardedModel, stepping its shards with SGD; the
// gathered parameters must be those of one process on the whole batch, whichever blocks keep
// their parameters for backward, over shared memory and tcp, with every parameter training or
// some frozen (as a LoRA fine-tune's base is). Between steps no bucket is whole: a rank holds its
// shards only, of the frozen parameters too.
#include "loom/parallel/sharded_model.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <set>
#include <thread>
#include <vector>

#include "loom/comm/make_communicator.h"
#include "loom/comm/store_server.h"
#include "loom/models/block_chain_model.h"
#include "loom/parallel/data_parallel.h"
#include "loom/parallel/zero_partition.h"

namespace loom::parallel {
namespace {

constexpr int kSteps = 3;
constexpr double kLr = 0.1;

// Values every rank and the reference start from, the same without a shared generator.
at::Tensor start_value(std::vector<int64_t> sizes, double offset) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return at::sin(at::arange(n, at::kFloat) * 0.37 + offset).reshape(sizes) * 0.5;
}

// The parameters frozen in the second case: one of the middle block's, and the head's own.
const std::set<std::string> kFrozen = {"mid.w", "head.g"};

struct Net {
  // embed [8, 6] (block "embed"), w [6, 6] and b [6] (block "mid"), g [6] (block "head", which
  // also reads embed); those named in `frozen` do not train.
  explicit Net(const std::set<std::string>& frozen = {}) {
    for (auto& [name, p] : parameters()) p.requires_grad_(!frozen.count(name));
  }
  at::Tensor embed = start_value({8, 6}, 0);
  at::Tensor w = start_value({6, 6}, 1);
  at::Tensor b = start_value({6}, 2);
  at::Tensor g = start_value({6}, 3);

  models::NamedTensors parameters() const {
    return {{"embed", embed}, {"mid.w", w}, {"mid.b", b}, {"head.g", g}};
  }
  std::vector<models::Block> blocks() {
    return {
        {"embed",
         [this](const at::Tensor& x) { return at::matmul(x, embed); },
         {{"embed", embed}},
         {},
         {}},
        {"mid",
         [this](const at::Tensor& h) { return at::tanh(at::matmul(h, w) + b); },
         {{"mid.w", w}, {"mid.b", b}},
         {},
         {}},
        {"head",
         [this](const at::Tensor& h) { return at::matmul(h * g, embed.t()); },
         {{"head.g", g}},
         {},
         {{"embed", embed}}},
    };
  }
};

at::Tensor inputs(int step) { return start_value({4, 8}, 10.0 + step); }
at::Tensor targets(int step) { return start_value({4, 8}, 20.0 + step); }

// One process on every batch whole: the parameters to match.
models::NamedTensors reference(const std::set<std::string>& frozen) {
  Net net(frozen);
  models::BlockChainModel model("net", net.blocks());
  for (int step = 0; step < kSteps; ++step) {
    at::mse_loss(model.forward(inputs(step)), targets(step)).backward();
    at::NoGradGuard no_grad;
    for (auto& [name, p] : net.parameters()) {
      if (frozen.count(name)) continue;
      p.sub_(p.grad() * kLr);
      p.mutable_grad().reset();
    }
  }
  return net.parameters();
}

struct RankResult {
  std::string error;
  models::NamedTensors parameters;
  bool whole_between_steps = false;
  // With frozen parameters: the bytes the frozen ones held when the embedding's gradient was
  // made (the last of backward), every step.
  std::vector<std::size_t> frozen_bytes_at_backward_end;
};

RankResult run_rank(const comm::WorldInfo& info, const std::string& backend, KeepAfterForward keep,
                    const std::set<std::string>& frozen) {
  RankResult result;
  try {
    auto rendezvous = comm::Rendezvous::connect(info, std::chrono::seconds(30));
    comm::CommOptions options;
    options.timeout = std::chrono::milliseconds(30000);
    auto comm = comm::make_communicator(backend, rendezvous, options);
    Net net(frozen);
    models::BlockChainModel model("net", net.blocks());
    ZeroPartition partition(net.parameters(), info.rank, 2, BucketLimits{}, 3, {},
                            {{"embed"}, {"mid.w", "mid.b"}, {"head.g"}});
    if (!frozen.empty()) {
      net.embed.register_hook([&](const at::Tensor&) {
        result.frozen_bytes_at_backward_end.push_back(net.w.storage().nbytes() +
                                                      net.g.storage().nbytes());
      });
    }
    DataParallelOptions dp_options;
    dp_options.zero = &partition;
    DataParallel dp(net.parameters(), {}, *comm, dp_options);
    partition.shard_parameters();
    ShardedModel sharded(model, partition, *comm, keep);
    for (int step = 0; step < kSteps; ++step) {
      dp.zero_grad();
      dp.prepare();
      // This rank's half of the batch; the mean of the halves' losses is the whole's.
      const at::Tensor x = inputs(step).narrow(0, 2 * info.rank, 2);
      const at::Tensor y = targets(step).narrow(0, 2 * info.rank, 2);
      at::mse_loss(sharded.forward(x), y).backward();
      dp.finish();
      dp.step(kLr, [&] {
        at::NoGradGuard no_grad;
        for (auto& [name, shard] : partition.shards()) shard.sub_(shard.grad() * kLr);
      });
      for (std::size_t bucket = 0; bucket < partition.bucket_count(); ++bucket) {
        result.whole_between_steps = result.whole_between_steps || partition.whole(bucket);
      }
    }
    partition.gather_parameters(*comm);
    for (auto& [name, p] : net.parameters())
      result.parameters.emplace_back(name, p.detach().clone());
  } catch (const std::exception& e) {
    result.error = "rank " + std::to_string(info.rank) + ": " + e.what();
  }
  return result;
}

std::vector<RankResult> run_ranks(const std::string& backend, KeepAfterForward keep,
                                  const std::set<std::string>& frozen) {
  const std::string token = "sharded-model";
  comm::StoreServer store("127.0.0.1", 0, comm::StoreServerOptions{token});
  std::vector<RankResult> results(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    comm::WorldInfo info;
    info.rank = info.local_rank = r;
    info.world = info.local_world = 2;
    info.master_addr = "127.0.0.1";
    info.master_port = store.port();
    info.launcher = "threads";
    info.store_served_by_launcher = true;
    info.store_token = token;
    ranks.emplace_back([&results, info, backend, keep, &frozen] {
      results[static_cast<std::size_t>(info.rank)] = run_rank(info, backend, keep, frozen);
    });
  }
  for (auto& rank : ranks) rank.join();
  return results;
}

TEST(ShardedModel, RanksTrainLikeOneProcessOnTheWholeBatch) {
  for (const std::set<std::string>& frozen : {std::set<std::string>{}, kFrozen}) {
    const models::NamedTensors want = reference(frozen);
    for (const std::string backend : {"shm", "tcp"}) {
      for (KeepAfterForward keep :
           {KeepAfterForward::kNone, KeepAfterForward::kLast, KeepAfterForward::kAll}) {
        SCOPED_TRACE(backend + ", keep " + std::to_string(static_cast<int>(keep)) + ", " +
                     std::to_string(frozen.size()) + " frozen");
        for (const RankResult& rank : run_ranks(backend, keep, frozen)) {
          ASSERT_TRUE(rank.error.empty()) << rank.error;
          EXPECT_FALSE(rank.whole_between_steps);
          ASSERT_EQ(rank.parameters.size(), want.size());
          for (std::size_t i = 0; i < want.size(); ++i) {
            EXPECT_EQ(rank.parameters[i].first, want[i].first);
            EXPECT_TRUE(at::allclose(rank.parameters[i].second, want[i].second, 1e-5, 1e-6))
                << want[i].first << ": " << rank.parameters[i].second << " vs " << want[i].second;
          }
          // Backward had passed the frozen ones' blocks: they were freed before it ended.
          EXPECT_EQ(rank.frozen_bytes_at_backward_end,
                    std::vector<std::size_t>(frozen.empty() ? 0 : kSteps, 0));
        }
      }
    }
  }
}

TEST(ZeroPartition, ShardedParametersLeaveOnlyTheShardsInMemory) {
  Net net;
  ZeroPartition partition(net.parameters(), 1, 2, BucketLimits{}, 3, {},
                          {{"embed"}, {"mid.w", "mid.b"}, {"head.g"}});
  // One bucket a block, the last block's first (backward's order).
  ASSERT_EQ(partition.bucket_count(), 3u);
  EXPECT_EQ(partition.bucket_of(partition.index_of("head.g")), 0u);
  EXPECT_EQ(partition.bucket_of(partition.index_of("mid.w")), 1u);
  EXPECT_EQ(partition.bucket_of(partition.index_of("mid.b")), 1u);
  EXPECT_EQ(partition.bucket_of(partition.index_of("embed")), 2u);
  const at::Tensor embed_before = net.embed.detach().clone();
  partition.shard_parameters();
  for (std::size_t b = 0; b < partition.bucket_count(); ++b) EXPECT_FALSE(partition.whole(b));
  // The parameters keep their shapes over memory that is gone; the shard keeps rank 1's half of
  // the embedding (48 elements: elements 24 to 47).
  EXPECT_EQ(net.embed.sizes(), (std::vector<int64_t>{8, 6}));
  EXPECT_EQ(net.embed.storage().nbytes(), 0u);
  EXPECT_TRUE(at::equal(partition.parameter_shard(2), embed_before.flatten().narrow(0, 24, 24)));
}

TEST(ZeroPartition, FrozenParametersAreShardedInBucketsOfTheirOwnWithoutGradients) {
  Net net(kFrozen);
  const at::Tensor w_before = net.w.detach().clone();
  ZeroPartition partition(net.parameters(), 0, 2, BucketLimits{}, 3, {},
                          {{"embed"}, {"mid.w", "mid.b"}, {"head.g"}});
  // The trained ones' buckets first (mid.b, then embed: backward's order), then the frozen
  // ones' (head.g, then mid.w).
  ASSERT_EQ(partition.bucket_count(), 4u);
  ASSERT_EQ(partition.trained_bucket_count(), 2u);
  EXPECT_EQ(partition.trained_parameter_count(), 2u);
  EXPECT_EQ(partition.bucket_plan().size(), 2u);
  EXPECT_EQ(partition.shards().size(), 2u);
  EXPECT_EQ(partition.bucket_of(partition.index_of("mid.b")), 0u);
  EXPECT_EQ(partition.bucket_of(partition.index_of("embed")), 1u);
  EXPECT_EQ(partition.bucket_of(partition.index_of("head.g")), 2u);
  EXPECT_EQ(partition.bucket_of(partition.index_of("mid.w")), 3u);
  EXPECT_FALSE(partition.trains(3));
  EXPECT_FALSE(partition.parameter_shard(3).requires_grad());
  partition.shard_parameters();
  EXPECT_EQ(net.w.storage().nbytes(), 0u);
  // Rank 0's half of w: its first 18 elements.
  EXPECT_TRUE(at::equal(partition.parameter_shard(3), w_before.flatten().narrow(0, 0, 18)));
  // No optimizer state of frozen parameters goes in or comes out.
  const NamedTensors state = partition.shard_state(
      {{"mid.b.momentum", at::ones({6})}, {"embed.momentum", at::ones({8, 6})}});
  EXPECT_EQ(state.size(), 2u);
}

}  // namespace
}  // namespace loom::parallel
