#include "loom/core/text.h"

#include <gtest/gtest.h>

namespace loom {
namespace {

TEST(Text, EditDistance) {
  EXPECT_EQ(edit_distance("", ""), 0u);
  EXPECT_EQ(edit_distance("abc", ""), 3u);
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(edit_distance("epoch", "epochs"), 1u);
}

TEST(Text, ClosestMatchUsesWholeKeyOrLastPart) {
  std::vector<std::string> keys = {"train.epochs", "train.max_steps", "optimizer.lr"};
  EXPECT_EQ(closest_match("train.epoch", keys), "train.epochs");
  EXPECT_EQ(closest_match("epochs", keys), "train.epochs");
  EXPECT_EQ(closest_match("zzzzzzzz", keys), "");
}

TEST(Text, JoinAlternatives) {
  EXPECT_EQ(join_alternatives({"a"}), "a");
  EXPECT_EQ(join_alternatives({"a", "b"}), "a or b");
  EXPECT_EQ(join_alternatives({"a", "b", "c"}), "a, b or c");
}

}  // namespace
}  // namespace loom
