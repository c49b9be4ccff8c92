#include "loom/train/best_checkpoint.h"

#include <gtest/gtest.h>

#include <cmath>

#include "loom/core/error.h"
#include "loom/train/evaluate.h"

namespace loom::train {
namespace {

// At an epoch's end the evaluation comes first and its checkpoint is committed after it.
TEST(KeepBest, AnEvaluationBecomesBestWhenItsCheckpointCommits) {
  KeepBest keep("test_loss");
  EXPECT_FALSE(keep.evaluated(10, 2.0).has_value());
  const auto first = keep.committed(10, "ckpt/step-10");
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->path, "ckpt/step-10");
  EXPECT_EQ(first->step, 10);
  EXPECT_EQ(first->metric, "test_loss");
  EXPECT_DOUBLE_EQ(first->value, 2.0);

  EXPECT_FALSE(keep.evaluated(20, 1.5).has_value());
  EXPECT_EQ(keep.committed(20, "ckpt/step-20")->step, 20);
  // Worse, and equal: the best stays the earlier one.
  EXPECT_FALSE(keep.evaluated(30, 1.8).has_value());
  EXPECT_FALSE(keep.committed(30, "ckpt/step-30").has_value());
  EXPECT_FALSE(keep.evaluated(40, 1.5).has_value());
  EXPECT_FALSE(keep.committed(40, "ckpt/step-40").has_value());
  ASSERT_TRUE(keep.best().has_value());
  EXPECT_EQ(keep.best()->step, 20);
  EXPECT_DOUBLE_EQ(keep.best()->value, 1.5);
}

// Under checkpoint.every_steps the step's checkpoint may be committed before its evaluation.
TEST(KeepBest, ACheckpointCommittedBeforeItsEvaluation) {
  KeepBest keep("test_loss");
  EXPECT_FALSE(keep.committed(6, "ckpt/step-6").has_value());  // no evaluation at step 6
  EXPECT_FALSE(keep.committed(8, "ckpt/step-8").has_value());
  const auto best = keep.evaluated(8, 0.7);
  ASSERT_TRUE(best.has_value());
  EXPECT_EQ(best->path, "ckpt/step-8");
  EXPECT_EQ(best->step, 8);
}

// A background write commits after a later evaluation has come: each is paired by its step.
TEST(KeepBest, EvaluationsWaitingForBackgroundWrites) {
  KeepBest keep("test_loss");
  keep.evaluated(10, 1.0);
  keep.evaluated(20, 1.2);  // worse than step 10's, which is not committed yet
  EXPECT_EQ(keep.committed(10, "ckpt/step-10")->step, 10);
  EXPECT_FALSE(keep.committed(20, "ckpt/step-20").has_value());
  EXPECT_EQ(keep.best()->step, 10);
}

// A save that failed (checkpoint.on_error: warn) leaves its evaluation without a checkpoint:
// the next committed one drops it, and later evaluations rank against what is kept.
TEST(KeepBest, AnEvaluationWhoseSaveFailedIsDropped) {
  KeepBest keep("test_loss");
  keep.evaluated(10, 1.0);
  keep.committed(10, "ckpt/step-10");
  keep.evaluated(20, 0.5);  // its save fails: never committed
  EXPECT_FALSE(keep.committed(25, "ckpt/step-25").has_value());
  EXPECT_EQ(keep.best()->step, 10);
  EXPECT_EQ(keep.evaluated(25, 0.9)->step, 25);
}

TEST(KeepBest, AccuracyIsBetterHigherAndPerplexityLower) {
  EvalResult result;
  result.loss = std::log(20.0);
  result.accuracy = 0.75;
  KeepBest accuracy("test_accuracy");
  EXPECT_DOUBLE_EQ(accuracy.value_of(result), 0.75);
  accuracy.evaluated(1, 0.5);
  accuracy.committed(1, "a");
  EXPECT_FALSE(accuracy.evaluated(2, 0.4).has_value());
  accuracy.committed(2, "b");
  accuracy.evaluated(3, 0.6);
  EXPECT_EQ(accuracy.committed(3, "c")->step, 3);

  KeepBest perplexity("test_perplexity");
  EXPECT_NEAR(perplexity.value_of(result), 20.0, 1e-9);
  perplexity.evaluated(1, 30.0);
  perplexity.committed(1, "a");
  perplexity.evaluated(2, 25.0);
  EXPECT_EQ(perplexity.committed(2, "b")->step, 2);
  EXPECT_DOUBLE_EQ(KeepBest("test_loss").value_of(result), std::log(20.0));
}

// A resumed run ranks against the best before it, when that was ranked by the same metric.
TEST(KeepBest, AResumedRunRanksAgainstTheRecordedBest) {
  KeepBest keep("test_loss");
  keep.resume({"ckpt/step-10", 10, "test_loss", 1.0});
  keep.evaluated(20, 1.1);
  EXPECT_FALSE(keep.committed(20, "ckpt/step-20").has_value());
  EXPECT_EQ(keep.best()->step, 10);

  KeepBest other("test_accuracy");
  other.resume({"ckpt/step-10", 10, "test_loss", 1.0});
  EXPECT_FALSE(other.best().has_value());
}

TEST(KeepBest, AnUnknownMetricIsAConfigErrorNamingTheKey) {
  try {
    KeepBest keep("val_bleu");
    FAIL() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.key(), "checkpoint.keep_best");
    EXPECT_EQ(e.field("value"), "val_bleu");
  }
}

}  // namespace
}  // namespace loom::train
