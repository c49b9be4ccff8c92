// ZeRO-1's partition: every parameter owned once, shares balanced within one tensor, and the
// same partition whatever order equal sizes come in.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <algorithm>

#include "loom/parallel/optimizer_shards.h"

namespace loom::parallel {
namespace {

models::NamedTensors tensors_of(const std::vector<int64_t>& sizes) {
  models::NamedTensors out;
  for (size_t i = 0; i < sizes.size(); ++i) {
    out.emplace_back("p" + std::to_string(i), at::zeros({sizes[i]}));
  }
  return out;
}

TEST(OptimizerShards, EveryParameterHasOneOwnerAndSharesAreBalanced) {
  const auto parameters = tensors_of({1000, 10, 500, 500, 300, 200, 7, 64000, 640, 3});
  for (int ranks : {1, 2, 3, 4}) {
    SCOPED_TRACE(ranks);
    const std::vector<int> owners = assign_owners(parameters, ranks);
    ASSERT_EQ(owners.size(), parameters.size());
    std::vector<int64_t> held(static_cast<size_t>(ranks), 0);
    int64_t total = 0, largest = 0;
    size_t owned = 0;
    for (int r = 0; r < ranks; ++r) {
      for (const auto& [name, t] : owned_by(parameters, owners, r)) {
        held[static_cast<size_t>(r)] += t.numel();
        ++owned;
      }
    }
    for (const auto& [name, t] : parameters) {
      total += t.numel();
      largest = std::max<int64_t>(largest, t.numel());
    }
    EXPECT_EQ(owned, parameters.size());
    // Largest first to the least loaded: no rank above an even share by more than one tensor.
    for (int64_t h : held) EXPECT_LE(h, total / ranks + largest);
    EXPECT_EQ(assign_owners(parameters, ranks), owners);  // a pure function of the shapes
  }
}

TEST(OptimizerShards, EqualSizesGoRoundTheRanksInTheModelsOrder) {
  const auto owners = assign_owners(tensors_of({8, 8, 8, 8, 8, 8}), 3);
  EXPECT_EQ(owners, (std::vector<int>{0, 1, 2, 0, 1, 2}));
}

}  // namespace
}  // namespace loom::parallel
