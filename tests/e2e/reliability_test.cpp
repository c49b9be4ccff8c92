// Surviving failures as a user meets them: a rank killed mid-epoch under --max-restarts, a
// preempted job (SIGTERM to the launcher), a rank that hangs (SIGSTOP) and a disk that fills
// up. Each ends the way docs/reliability.md promises, and a job that goes on after a failure
// ends bit-identical to one that never failed.
#include <gtest/gtest.h>
#include <sys/mount.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "tools/run_compare.h"
#include "tools/test_support.h"

namespace loom::test {
namespace {

// fp32, no dropout, a global batch of 32: 8 steps an epoch, 16 in all, a checkpoint every 4.
std::string train_command(const std::string& out) {
  return test::loom_binary() + " train " + tiny_synthetic_args() +
         " --set model=mlp --set model.dropout=0 --set runtime.precision=fp32 --set "
         "train.epochs=2 --set data.global_batch=32 --set checkpoint.every_steps=4 --out " +
         out;
}

// That job on two ranks.
std::string two_rank_job(const std::string& out, const std::string& launch_flags = "") {
  return "launch --nproc-per-node 2 " + launch_flags + " -- " + train_command(out);
}

TEST(Reliability, AKilledRankIsRestartedAndTheJobEndsBitIdentical) {
  TempDir dir;
  // Rank 1 sleeps 250 ms after each step, so that its heartbeats (looked at every 100 ms) see
  // every step, the last one included.
  const auto restarted = run_loom(two_rank_job(dir / "restarted", "--max-restarts 1"),
                                  "LOOM_FAULT_KILL_RANK_AFTER_STEP=1:6 LOOM_FAULT_SLOW_RANK=1:250");
  ASSERT_EQ(restarted.exit_code, 0) << restarted.output;
  EXPECT_NE(restarted.output.find("loom launch: rank 1 (pid "), std::string::npos)
      << restarted.output;
  const auto summary = summary_of(dir / "restarted");
  EXPECT_EQ(summary["resumed_from_step"], 4);
  ASSERT_EQ(summary["restarts"].size(), 1u) << summary.dump(2);
  const auto& restart = summary["restarts"][0];
  EXPECT_EQ(restart["cause"], "rank 1 was killed by signal 9 (SIGKILL)");
  EXPECT_EQ(restart["resumed_from_step"], 4);
  // The heartbeats had rank 1 at step 6 when it died after that step.
  ASSERT_TRUE(restart["failed_at_step"].is_number()) << summary.dump(2);
  EXPECT_EQ(restart["failed_at_step"].get<int>(), 6);
  EXPECT_EQ(restart["lost_steps"].get<int>(), restart["failed_at_step"].get<int>() - 4);

  const auto straight = run_loom(two_rank_job(dir / "straight"));
  ASSERT_EQ(straight.exit_code, 0) << straight.output;
  expect_identical_runs(dir / "restarted", dir / "straight");

  // Without restarts the same failure ends the job, naming the rank.
  const auto failed = run_loom(two_rank_job(dir / "failed"), "LOOM_FAULT_KILL_RANK_AFTER_STEP=1:6");
  EXPECT_EQ(failed.exit_code, 1) << failed.output;
  EXPECT_NE(failed.output.find("loom launch: failed: rank 1 was killed by signal 9"),
            std::string::npos)
      << failed.output;
}

// Two nodes (launchers) of one rank each: rank 1 dies on node 1, and both launchers restart
// their ranks together through node 0's store.
TEST(Reliability, EveryNodeTakesPartInTheRestart) {
  TempDir dir;
  const std::string where = "--nnodes 2 --max-restarts 1 --join-timeout 60 --master 127.0.0.1:" +
                            std::to_string(free_port()) + " --nproc-per-node 1";
  const std::string train = " -- " + train_command(dir / "run");
  BackgroundProcess second("env LOOM_FAULT_KILL_RANK_AFTER_STEP=1:6 " + test::loom_binary() +
                               " launch --node-rank 1 " + where + train,
                           dir / "node1.log");
  const auto first = run_loom("launch --node-rank 0 " + where + train);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  ASSERT_EQ(second.wait(), 0) << read_text(dir / "node1.log");
  const std::string node1 = read_text(dir / "node1.log");
  EXPECT_NE(node1.find("loom launch: rank 1 (pid "), std::string::npos) << node1;
  // Rank 0 on node 0 fails too, a moment later, for want of its peer: node 0 still names the
  // first failure, by the clock, as the cause.
  const auto summary = summary_of(dir / "run");
  ASSERT_EQ(summary["restarts"].size(), 1u) << summary.dump(2);
  EXPECT_EQ(summary["restarts"][0]["cause"], "node 1: rank 1 was killed by signal 9 (SIGKILL)");
  EXPECT_EQ(summary["restarts"][0]["resumed_from_step"], 4);
  EXPECT_EQ(summary["resumed_from_step"], 4);

  const auto straight = run_loom(two_rank_job(dir / "straight"));
  ASSERT_EQ(straight.exit_code, 0) << straight.output;
  expect_identical_runs(dir / "run", dir / "straight");
}

// Node 1 (one rank) is lost for good: its rank dies after step 6 and its launcher, which has
// no restarts of its own, leaves. Node 0 (--nnodes 1:2) goes on alone from the checkpoint of
// step 4 with the same global batch, one rank of 32 instead of two of 16: every step trains on
// the same samples (Loader.EveryStepHasTheSameSamplesOnAnyNumberOfRanks), so the result is the
// uninterrupted two-rank run's within floating-point reassociation.
TEST(Reliability, AJobGoesOnWithFewerRanksWhenANodeStaysAway) {
  TempDir dir;
  const std::string where = "--join-timeout 8 --master 127.0.0.1:" + std::to_string(free_port()) +
                            " --nproc-per-node 1 -- " + train_command(dir / "run");
  BackgroundProcess lost("env LOOM_FAULT_KILL_RANK_AFTER_STEP=1:6 " + test::loom_binary() +
                             " launch --node-rank 1 --nnodes 2 " + where,
                         dir / "node1.log");
  const auto survivor =
      run_loom("launch --node-rank 0 --nnodes 1:2 --max-restarts 1 --min-nproc 1 " + where);
  ASSERT_EQ(survivor.exit_code, 0) << survivor.output << read_text(dir / "node1.log");
  EXPECT_NE(lost.wait(), 0);
  // The launcher names the node it goes on without.
  EXPECT_NE(survivor.output.find("loom launch: going on without node(s) 1,"), std::string::npos)
      << survivor.output;
  const auto summary = summary_of(dir / "run");
  EXPECT_EQ(summary["data_parallel"]["ranks"], 1) << summary.dump(2);
  EXPECT_EQ(summary["resumed_from_step"], 4);
  EXPECT_EQ(summary["steps"], 16);
  ASSERT_EQ(summary["restarts"].size(), 1u) << summary.dump(2);
  EXPECT_EQ(summary["restarts"][0]["resumed_from_step"], 4);

  const auto straight = run_loom(two_rank_job(dir / "straight"));
  ASSERT_EQ(straight.exit_code, 0) << straight.output;
  expect_same_model(dir / "run", dir / "straight", 1e-5);
}

TEST(Reliability, APreemptedJobCommitsItsStepExitsResumableAndResumesExactly) {
  TempDir dir;
  // Rank 0 sleeps 150 ms after each step, so that the job is still running when the signal
  // comes, which is once the step-4 log line is written.
  BackgroundProcess job("env LOOM_FAULT_SLOW_RANK=0:150 " + test::loom_binary() + " " +
                            two_rank_job(dir / "run", "--max-restarts 2") +
                            " --set train.preempt_grace_s=20 --set checkpoint.every_steps=0",
                        dir / "job.log");
  ASSERT_TRUE(wait_for_text(dir / "run/metrics.jsonl", "\"step\":4", 120))
      << read_text(dir / "job.log");
  const auto signalled = std::chrono::steady_clock::now();
  job.signal(SIGTERM);
  const int code = job.wait();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - signalled).count();
  const std::string log = read_text(dir / "job.log");
  ASSERT_EQ(code, 75) << log;  // preempted, resumable; not restarted: it is not a failure
  EXPECT_LT(seconds, 20.0) << log;
  const auto summary = summary_of(dir / "run");
  EXPECT_TRUE(summary["preempted"].get<bool>());
  EXPECT_TRUE(summary["restarts"].empty()) << summary.dump(2);
  const int stopped_at = summary["steps"];
  EXPECT_GE(stopped_at, 4);
  EXPECT_LT(stopped_at, 8);  // well before the end of the first epoch's 8 steps
  char step_dir[32];
  std::snprintf(step_dir, sizeof step_dir, "step-%08d", stopped_at);
  EXPECT_EQ(std::filesystem::path(latest_checkpoint(dir / "run")).filename(), step_dir)
      << "the checkpoint of the step it stopped after";

  const auto resumed =
      run_loom(two_rank_job(dir / "run") + " --set checkpoint.every_steps=0 --resume");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_EQ(summary_of(dir / "run")["resumed_from_step"], stopped_at);
  const auto straight =
      run_loom(two_rank_job(dir / "straight") + " --set checkpoint.every_steps=0");
  ASSERT_EQ(straight.exit_code, 0) << straight.output;
  expect_identical_runs(dir / "run", dir / "straight");
}

// SIGTERM to one rank only (a spot agent that signals processes, not the launcher): the ranks
// agree to stop at the same step, every one exits 75, and the launcher, which was not
// interrupted itself, passes 75 on instead of taking a rank's exit for a failure to restart.
TEST(Reliability, ASigtermToOneRankStopsEveryRankResumably) {
  TempDir dir;
  BackgroundProcess job("env LOOM_FAULT_SLOW_RANK=0:150 " + test::loom_binary() + " " +
                            two_rank_job(dir / "run", "--max-restarts 2"),
                        dir / "job.log");
  ASSERT_TRUE(wait_for_text(dir / "run/metrics.jsonl", "\"step\":4", 120))
      << read_text(dir / "job.log");
  // Rank 1's process: the `loom train` of this test's run (other tests run beside it) whose
  // environment says RANK=1.
  // Exits 0 only if it signalled one.
  const auto signalled = run_command("sent=1; for p in $(pgrep -f 'train .*--out " + (dir / "run") +
                                     "$'); do tr '\\0' '\\n' < /proc/$p/environ | grep -qx "
                                     "RANK=1 && kill -TERM $p && sent=0; done; exit $sent");
  ASSERT_EQ(signalled.exit_code, 0) << signalled.output;
  const int code = job.wait();
  const std::string log = read_text(dir / "job.log");
  EXPECT_EQ(code, 75) << log;
  const auto summary = summary_of(dir / "run");
  EXPECT_TRUE(summary["preempted"].get<bool>()) << log;
  EXPECT_TRUE(summary["restarts"].empty()) << summary.dump(2);
}

TEST(Reliability, TheWatchdogNamesARankThatHangs) {
  TempDir dir;
  // Rank 1 stops itself (SIGSTOP) after step 3; rank 0 waits for it in the next all-reduce.
  const auto r = run_loom(two_rank_job(dir / "run", "--grace 2") +
                              " --set train.stall_timeout_s=4 --set comm.timeout_s=60",
                          "LOOM_FAULT_FREEZE_RANK_AFTER_STEP=1:3");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  // Rank 0 finished step 3 too, and waits for rank 1 to agree on going on.
  EXPECT_NE(r.output.find("[loom:watchdog] error: rank 0 made no progress for 4.0 s "
                          "(train.stall_timeout_s), in comm_exposed of step 3"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("not heard from rank 1 (pid "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rank 0: every thread's stack:\n[rank 0] thread "), std::string::npos)
      << r.output;
  // The launcher names it too, from the report the watchdog left in the store.
  EXPECT_NE(r.output.find("loom launch: stall watchdog: rank 0 made no progress"),
            std::string::npos)
      << r.output;
}

TEST(Reliability, AFullDiskStopsTheRunOrWarnsAsConfigured) {
  TempDir dir;
  const std::string small = dir / "small";
  std::filesystem::create_directories(small);
  if (::mount("tmpfs", small.c_str(), "tmpfs", 0, "size=400k") != 0) {
    GTEST_SKIP() << "cannot mount a tmpfs here: " << std::strerror(errno);
  }
  struct Unmount {
    std::string path;
    ~Unmount() { ::umount2(path.c_str(), MNT_DETACH); }
  } unmount{small};
  // The MLP's checkpoint (parameters and momentum) needs more than the tmpfs holds.
  const std::string run = tiny_synthetic_args() +
                          " --set model=mlp --set train.epochs=1 "
                          "--set checkpoint.every_steps=4 --set train.eval=false --out ";
  const auto stopped = run_loom("train " + run + small + "/stop");
  EXPECT_EQ(stopped.exit_code, 1) << stopped.output;
  EXPECT_NE(stopped.output.find("checkpoint of step 4 in " + small + "/stop/checkpoints: "),
            std::string::npos)
      << stopped.output;
  EXPECT_NE(stopped.output.find("No space left on device"), std::string::npos) << stopped.output;
  EXPECT_NE(stopped.output.find("it needs about "), std::string::npos) << stopped.output;
  EXPECT_NE(stopped.output.find("(checkpoint.on_error: stop)"), std::string::npos)
      << stopped.output;

  const auto warned = run_loom("train " + run + small + "/warn --set checkpoint.on_error=warn");
  EXPECT_EQ(warned.exit_code, 0) << warned.output;
  EXPECT_NE(warned.output.find("(checkpoint.on_error: warn)"), std::string::npos)  // names the key
      << warned.output;
  EXPECT_EQ(summary_of(small + "/warn")["checkpoint_failures"], 4);  // steps 4, 8, 12, 16
}

}  // namespace
}  // namespace loom::test
