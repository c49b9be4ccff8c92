#include "loom/parallel/mesh.h"

#include <gtest/gtest.h>

#include <set>

#include "loom/core/error.h"

namespace loom::parallel {
namespace {

// The plan's layout of 2 pipelines of 3 ranks: a pipeline's ranks are consecutive.
const Mesh kTwoPipelinesOfThree({{"data", 2}, {"pipeline", 3}});

TEST(Mesh, CoordinatesPutAPipelinesRanksNextToEachOther) {
  EXPECT_EQ(kTwoPipelinesOfThree.ranks(), 6);
  EXPECT_EQ(kTwoPipelinesOfThree.coordinate(4, kDataDim), 1);
  EXPECT_EQ(kTwoPipelinesOfThree.coordinate(4, kPipelineDim), 1);
  EXPECT_EQ(kTwoPipelinesOfThree.group(4, kPipelineDim), (std::vector<int>{3, 4, 5}));
  EXPECT_EQ(kTwoPipelinesOfThree.group(4, kDataDim), (std::vector<int>{1, 4}));
  // A dimension the mesh lacks: size 1, coordinate 0, the rank alone.
  EXPECT_EQ(kTwoPipelinesOfThree.size("tensor"), 1);
  EXPECT_EQ(kTwoPipelinesOfThree.coordinate(5, "tensor"), 0);
  EXPECT_EQ(kTwoPipelinesOfThree.group(5, "tensor"), std::vector<int>{5});
  EXPECT_EQ(kTwoPipelinesOfThree.describe(), "data 2 x pipeline 3");
  EXPECT_EQ(Mesh().describe(), "1 rank");
  EXPECT_EQ(Mesh().ranks(), 1);
}

TEST(Mesh, EveryDimensionsGroupsPartitionTheRanksUnderNamesOfTheirOwn) {
  const Mesh mesh({{"data", 2}, {"pipeline", 2}, {"tensor", 3}});
  for (const char* dim : {"data", "pipeline", "tensor"}) {
    std::set<int> seen;
    std::set<std::string> names;
    for (int r = 0; r < mesh.ranks(); ++r) {
      const std::vector<int> group = mesh.group(r, dim);
      ASSERT_EQ(static_cast<int>(group.size()), mesh.size(dim)) << dim;
      // Each member is at its own coordinate along `dim` and shares every other one with r,
      // and names the group as r does.
      for (int c = 0; c < mesh.size(dim); ++c) {
        const int member = group[static_cast<size_t>(c)];
        EXPECT_EQ(mesh.coordinate(member, dim), c) << dim;
        for (const MeshDim& other : mesh.dims()) {
          if (other.name != dim) {
            EXPECT_EQ(mesh.coordinate(member, other.name), mesh.coordinate(r, other.name));
          }
        }
        EXPECT_EQ(mesh.group_name(member, dim), mesh.group_name(r, dim));
      }
      if (mesh.coordinate(r, dim) == 0) {  // once per group
        names.insert(mesh.group_name(r, dim));
        seen.insert(group.begin(), group.end());
      }
    }
    EXPECT_EQ(static_cast<int>(seen.size()), mesh.ranks()) << dim;
    EXPECT_EQ(static_cast<int>(names.size()), mesh.ranks() / mesh.size(dim)) << dim;
  }
  EXPECT_EQ(mesh.group_name(7, "pipeline"), "pipeline[data=1,tensor=1]");
}

TEST(Mesh, FindsAGroupThatSpansHosts) {
  const Mesh mesh({{"data", 2}, {"tensor", 2}});
  // Two ranks a host: each tensor group is on one host, each data group across two.
  EXPECT_TRUE(mesh.group_across_hosts("tensor", {0, 0, 1, 1}).empty());
  EXPECT_EQ(mesh.group_across_hosts("data", {0, 0, 1, 1}), (std::vector<int>{0, 2}));
  // Three ranks on the first host: the second tensor group straddles both.
  EXPECT_EQ(mesh.group_across_hosts("tensor", {0, 0, 0, 1}), (std::vector<int>{2, 3}));
  EXPECT_TRUE(mesh.group_across_hosts("tensor", {0, 0, 0, 0}).empty());
}

TEST(Mesh, RefusesBadSizesRepeatedNamesAndRanksOutside) {
  EXPECT_THROW(Mesh({{"data", 0}}), Error);
  EXPECT_THROW(Mesh({{"data", 2}, {"data", 2}}), Error);
  EXPECT_THROW(kTwoPipelinesOfThree.group(6, kDataDim), Error);
  EXPECT_THROW(kTwoPipelinesOfThree.coordinate(-1, kDataDim), Error);
}

}  // namespace
}  // namespace loom::parallel
