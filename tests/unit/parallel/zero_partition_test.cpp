// ZeRO's flat partition, without communication: ranks are simulated by one partition per rank
// over copies of the same parameters. Stepping the shards must be stepping the parameters, and
// optimizer state must survive the trip into shards and back under the parameters' names.
#include "loom/parallel/zero_partition.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/optim/adamw.h>

#include <map>
#include <memory>

#include "loom/core/error.h"

namespace loom::parallel {
namespace {

// Odd sizes, so that buckets need padding; one matrix is channels_last-free but 2-D.
NamedTensors make_parameters(std::uint64_t seed) {
  at::manual_seed(static_cast<int64_t>(seed));
  NamedTensors out;
  const std::vector<std::vector<int64_t>> shapes = {{7}, {5, 3}, {33}, {2, 2, 5}, {1}, {40}};
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    out.emplace_back("layer" + std::to_string(i) + ".weight",
                     at::randn(shapes[i]).set_requires_grad(true));
  }
  return out;
}

NamedTensors copy_of(const NamedTensors& parameters) {
  NamedTensors out;
  for (const auto& [name, t] : parameters) {
    out.emplace_back(name, t.detach().clone().set_requires_grad(true));
  }
  return out;
}

const BucketLimits kSmallBuckets{64, 160};  // bytes: several buckets of a few parameters

TEST(ZeroPartition, ParametersMoveIntoPaddedBucketsUnchanged) {
  NamedTensors parameters = make_parameters(1);
  const NamedTensors before = copy_of(parameters);
  const at::Tensor* first = &parameters[0].second;
  const void* impl = first->unsafeGetTensorImpl();
  ZeroPartition zero(parameters, 1, 3, kSmallBuckets, 1);

  ASSERT_GT(zero.bucket_count(), 1u);
  std::vector<int> seen(parameters.size(), 0);
  for (std::size_t b = 0; b < zero.bucket_count(); ++b) {
    int64_t used = 0;
    for (int p : zero.parameters_in(b)) {
      ++seen[p];
      EXPECT_EQ(zero.offset_of(p), used);
      used += parameters[p].second.numel();
    }
    EXPECT_EQ(zero.bucket_numel(b) % 3, 0);
    EXPECT_GE(zero.bucket_numel(b), used);
    EXPECT_LT(zero.bucket_numel(b), used + 3);
    EXPECT_EQ(zero.shards()[b].second.numel(), zero.bucket_numel(b) / 3);
    EXPECT_EQ(zero.shards()[b].first, "zero.bucket" + std::to_string(b) + ".rank1");
  }
  for (int count : seen) EXPECT_EQ(count, 1);
  for (std::size_t i = 0; i < parameters.size(); ++i) {
    EXPECT_TRUE(at::equal(parameters[i].second, before[i].second)) << parameters[i].first;
  }
  EXPECT_EQ(parameters[0].second.unsafeGetTensorImpl(), impl);  // the same tensor, moved

  // A shard is the parameters' memory: writing it writes them.
  const std::size_t b = 0;
  const int p = zero.parameters_in(b).front();
  {
    at::NoGradGuard no_grad;
    zero.shards()[b].second.fill_(7);
  }
  const int64_t shard = zero.bucket_numel(b) / 3;
  const at::Tensor flat = parameters[p].second.flatten();
  for (int64_t e = 0; e < flat.numel(); ++e) {
    const int64_t at_in_bucket = zero.offset_of(p) + e;
    const bool mine = at_in_bucket >= shard && at_in_bucket < 2 * shard;
    if (mine) {
      EXPECT_EQ(flat[e].item<float>(), 7.0f) << e;
    }
  }
}

// Every rank steps its shards with its part of the same gradients: together they make what
// AdamW over the whole parameters makes.
TEST(ZeroPartition, SteppingEveryRanksShardsIsSteppingTheParameters) {
  const int ranks = 2;
  NamedTensors reference = make_parameters(2);
  std::vector<NamedTensors> replicas;
  std::vector<std::unique_ptr<ZeroPartition>> zero;
  for (int r = 0; r < ranks; ++r) replicas.push_back(copy_of(reference));
  for (int r = 0; r < ranks; ++r) {
    zero.push_back(std::make_unique<ZeroPartition>(replicas[r], r, ranks, kSmallBuckets, 2));
  }
  std::vector<at::Tensor> reference_tensors;
  for (auto& [name, t] : reference) reference_tensors.push_back(t);
  torch::optim::AdamW whole(reference_tensors, torch::optim::AdamWOptions(0.01).weight_decay(0.1));
  std::vector<std::unique_ptr<torch::optim::AdamW>> shard_optimizers;
  for (int r = 0; r < ranks; ++r) {
    std::vector<at::Tensor> shards;
    for (auto& [name, t] : zero[r]->shards()) shards.push_back(t);
    shard_optimizers.push_back(std::make_unique<torch::optim::AdamW>(
        shards, torch::optim::AdamWOptions(0.01).weight_decay(0.1)));
  }

  for (int step = 0; step < 3; ++step) {
    // The step's mean gradient, laid into each rank's gradient shards as a reduce-scatter would.
    for (std::size_t i = 0; i < reference.size(); ++i) {
      reference[i].second.mutable_grad() = at::randn(reference[i].second.sizes());
    }
    for (int r = 0; r < ranks; ++r) {
      for (std::size_t b = 0; b < zero[r]->bucket_count(); ++b) {
        at::Tensor flat = at::zeros({zero[r]->bucket_numel(b)});
        for (int p : zero[r]->parameters_in(b)) {
          const at::Tensor& g = reference[p].second.grad();
          flat.narrow(0, zero[r]->offset_of(p), g.numel()).copy_(g.flatten());
        }
        const int64_t shard = zero[r]->bucket_numel(b) / ranks;
        zero[r]->gradient_shard(b).copy_(flat.narrow(0, r * shard, shard));
      }
      zero[r]->attach_gradients();
      shard_optimizers[r]->step();
    }
    whole.step();
    // What an all-gather does: each element from the rank that owns it.
    for (std::size_t b = 0; b < zero[0]->bucket_count(); ++b) {
      const int64_t shard = zero[0]->bucket_numel(b) / ranks;
      for (int p : zero[0]->parameters_in(b)) {
        const at::Tensor expected = reference[p].second.detach().flatten();
        for (int r = 0; r < ranks; ++r) {
          const at::Tensor mine = replicas[r][p].second.detach().flatten();
          for (int64_t e = 0; e < expected.numel(); ++e) {
            const int64_t at_in_bucket = zero[r]->offset_of(p) + e;
            if (at_in_bucket / shard != r) continue;
            EXPECT_FLOAT_EQ(mine[e].item<float>(), expected[e].item<float>())
                << reference[p].first << "[" << e << "] on rank " << r << ", step " << step;
          }
        }
      }
    }
  }
  // Only the rank's share of the state: about half the elements each.
  int64_t held = 0, total = 0;
  for (auto& [name, t] : zero[0]->shards()) held += t.numel();
  for (auto& [name, t] : reference) total += t.numel();
  EXPECT_LE(held, total / 2 + static_cast<int64_t>(zero[0]->bucket_count()));
}

TEST(ZeroPartition, OptimizerStateGoesIntoShardsAndBackUnderTheParametersNames) {
  const int ranks = 3;
  NamedTensors parameters = make_parameters(3);
  NamedTensors named;
  for (const auto& [name, t] : parameters) {
    named.emplace_back(name + ".step", at::scalar_tensor(5, at::kLong));
    named.emplace_back(name + ".exp_avg", at::randn(t.sizes()));
    named.emplace_back(name + ".exp_avg_sq", at::rand(t.sizes()));
  }
  NamedTensors every_rank;
  std::vector<NamedTensors> replicas;
  for (int r = 0; r < ranks; ++r) replicas.push_back(copy_of(parameters));
  std::unique_ptr<ZeroPartition> last;
  for (int r = 0; r < ranks; ++r) {
    last = std::make_unique<ZeroPartition>(replicas[r], r, ranks, kSmallBuckets, 1);
    for (auto& entry : last->shard_state(named)) {
      EXPECT_NE(entry.first.find(".rank" + std::to_string(r) + "."), std::string::npos);
      every_rank.push_back(std::move(entry));
    }
  }
  const NamedTensors back = last->named_state(every_rank);
  ASSERT_EQ(back.size(), named.size());
  std::map<std::string, at::Tensor> by_name(back.begin(), back.end());
  for (const auto& [name, t] : named) {
    ASSERT_TRUE(by_name.count(name)) << name;
    EXPECT_TRUE(at::equal(by_name[name], t)) << name;
  }

  // A missing field is named.
  named.pop_back();
  try {
    last->shard_state(named);
    FAIL() << "a missing field was accepted";
  } catch (const loom::Error& e) {
    EXPECT_EQ(e.field("problem"), "missing");
    EXPECT_NE(e.field("tensor").find(".exp_avg_sq"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace loom::parallel
