// `loom launch --nproc-per-node 2 -- loom train`: the user's view of data parallelism. Two ranks
// on a global batch of B must train like one process on batches of B (the ranks' shares of a
// global batch are exactly the samples of the single process's batch), rank 0 alone writes the
// run directory, and a global batch that does not divide over the ranks is a config error.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "tools/run_compare.h"
#include "tools/test_support.h"

namespace loom::test {
namespace {

// fp32 and no dropout: the only difference left is how the batch is split over ranks.
std::string exact_args() {
  return tiny_synthetic_args() +
         " --set model=mlp --set model.dropout=0 --set runtime.precision=fp32 --set train.epochs=2";
}

TEST(DataParallelTrain, TwoRanksTrainLikeOneProcessOnTheSameGlobalBatch) {
  TempDir dir;
  // An odd test split: the ranks evaluate 32 and 31 samples, together all 63 once.
  const std::string args = exact_args() + " --set data.test_samples=63";
  const auto single =
      run_loom("train " + args + " --set data.batch_size=32 --out " + (dir / "one"));
  ASSERT_EQ(single.exit_code, 0) << single.output;
  const auto ddp = run_loom("launch --nproc-per-node 2 -- " + test::loom_binary() + " train " +
                            args + " --set data.global_batch=32 --out " + (dir / "two"));
  ASSERT_EQ(ddp.exit_code, 0) << ddp.output;

  const auto one = summary_of(dir / "one"), two = summary_of(dir / "two");
  EXPECT_EQ(two["steps"], one["steps"]);
  EXPECT_EQ(two["data_parallel"]["ranks"], 2);
  EXPECT_EQ(one["data_parallel"]["ranks"], 1);
  EXPECT_NEAR(two["test_loss"].get<double>(), one["test_loss"].get<double>(),
              1e-4 * one["test_loss"].get<double>());
  EXPECT_DOUBLE_EQ(two["test_accuracy"].get<double>(), one["test_accuracy"].get<double>());
  EXPECT_NEAR(two["final_train_loss"].get<double>(), one["final_train_loss"].get<double>(),
              1e-4 * one["final_train_loss"].get<double>());
  EXPECT_GT(two["data_parallel"]["buckets"].get<int>(), 0);
  EXPECT_GT(two["data_parallel"]["bytes_per_step"].get<double>(), 0);
  EXPECT_EQ(two["data_parallel"]["backend"], "shm");  // the ranks share the host

  // Rank 0 reports for both: one summary line, one set of files.
  EXPECT_EQ(count_of(ddp.output, "summary:"), 1) << ddp.output;
}

// Every rank must switch bucket sizes at the same step (or the shm communicator reports
// mismatched calls), and tuning must not change what is learned.
TEST(DataParallelTrain, AutotuningTwoRanksKeepsThemInStepAndTheResultTheSame) {
  TempDir dir;
  const std::string args = exact_args() +
                           " --set train.epochs=4 --set parallel.first_bucket_mb=0.01"
                           " --set parallel.bucket_cap_mb=0.05 --set checkpoint.enabled=false"
                           " --set optimizer.lr=0.002";  // a loss still far from 0 after 32 steps
  const auto single =
      run_loom("train " + args + " --set data.batch_size=32 --out " + (dir / "one"));
  ASSERT_EQ(single.exit_code, 0) << single.output;
  // One-step trials: the thread candidates grow with the host's cores, and all of them and the
  // bucket caps (tried last) must fit in the 32 steps on a many-core host too.
  const auto ddp =
      run_loom("launch --nproc-per-node 2 -- " + test::loom_binary() + " train " + args + " " +
               quick_autotune_args() + " --set autotune.samples=1 --set autotune.warmup_steps=0" +
               " --set data.global_batch=32 --out " + (dir / "two"));
  ASSERT_EQ(ddp.exit_code, 0) << ddp.output;
  const auto one = summary_of(dir / "one"), two = summary_of(dir / "two");
  const auto& tune = two["autotune"];
  ASSERT_TRUE(tune.is_object()) << two.dump(2);
  EXPECT_TRUE(tune["complete"].get<bool>());
  EXPECT_TRUE(tune["chosen"].contains("parallel.bucket_cap_mb")) << tune.dump(2);
  int bucket_trials = 0;
  for (const auto& t : tune["trials"]) bucket_trials += t["varied"] == "parallel.bucket_cap_mb";
  EXPECT_GE(bucket_trials, 1) << tune.dump(2);  // 2 MB and 5 MB make fewer buckets than 0.05
  EXPECT_EQ(two["steps"], one["steps"]);
  EXPECT_GT(one["final_train_loss"].get<double>(), 0.1);
  EXPECT_NEAR(two["final_train_loss"].get<double>(), one["final_train_loss"].get<double>(),
              1e-4 * one["final_train_loss"].get<double>());
  EXPECT_NEAR(two["test_loss"].get<double>(), one["test_loss"].get<double>(),
              1e-4 * one["test_loss"].get<double>());
}

TEST(DataParallelTrain, TraceHasOneProcessPerRank) {
  TempDir dir;
  const auto result = run_loom(
      "launch --nproc-per-node 2 -- " + test::loom_binary() + " train " + tiny_synthetic_args() +
      " --set train.max_steps=8 --set profile.trace_wait=1 --trace --out " + dir.path());
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const auto trace = nlohmann::json::parse(read_text(dir / "trace.json"));
  std::set<int> pids;
  std::set<std::string> process_names;
  for (const auto& event : trace["traceEvents"]) {
    pids.insert(event["pid"].get<int>());
    if (event["ph"] == "M" && event["name"] == "process_name") {
      process_names.insert(event["args"]["name"].get<std::string>());
    }
  }
  EXPECT_EQ(pids, (std::set<int>{0, 1}));
  EXPECT_EQ(process_names, (std::set<std::string>{"loom train (rank 0)", "loom train (rank 1)"}));
  EXPECT_FALSE(std::filesystem::exists(dir / "trace.rank1.json"));  // merged, then removed
}

TEST(DataParallelTrain, GlobalBatchMustDivideOverTheRanks) {
  TempDir dir;
  const auto result =
      run_loom("launch --nproc-per-node 2 -- " + test::loom_binary() + " train " +
               tiny_synthetic_args() + " --set data.global_batch=33 --out " + dir.path());
  EXPECT_EQ(result.exit_code, 2) << result.output;
  EXPECT_NE(result.output.find("data.global_batch"), std::string::npos) << result.output;
}

TEST(DataParallelTrain, ResumesOnTwoRanks) {
  TempDir dir;
  const std::string launch =
      "launch --nproc-per-node 2 -- " + test::loom_binary() + " train " + exact_args() +
      " --set data.global_batch=32 --set checkpoint.every_steps=4 --out " + dir.path();
  // Rank 0 is "preempted" right after the checkpoint of step 8; the launcher stops rank 1.
  const auto stopped = run_loom(launch, "LOOM_FAULT_STOP_AFTER_STEP=8");
  EXPECT_NE(stopped.exit_code, 0) << stopped.output;
  const auto resumed = run_loom(launch + " --resume");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_EQ(summary_of(dir.path())["resumed_from_step"], 8);

  TempDir straight;
  const auto uninterrupted =
      run_loom("launch --nproc-per-node 2 -- " + test::loom_binary() + " train " + exact_args() +
               " --set data.global_batch=32 --out " + straight.path());
  ASSERT_EQ(uninterrupted.exit_code, 0) << uninterrupted.output;
  EXPECT_NEAR(summary_of(dir.path())["test_loss"].get<double>(),
              summary_of(straight.path())["test_loss"].get<double>(), 1e-5);
}

}  // namespace
}  // namespace loom::test
