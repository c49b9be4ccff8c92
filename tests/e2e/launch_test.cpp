// `loom launch` as a supervisor: the ranks' environment, signals passed on, and clear errors for
// a bad command line or a command that cannot run.
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <sstream>
#include <thread>

#include "tools/test_support.h"

namespace loom::test {
namespace {

TEST(Launch, GivesEveryRankItsPlace) {
  const auto r = run_loom(
      "launch --nproc-per-node 3 -- sh -c 'echo \"rank=$RANK world=$WORLD_SIZE "
      "local=$LOCAL_RANK/$LOCAL_WORLD_SIZE "
      "master=$MASTER_ADDR launch=${LOOM_LAUNCH_ID:+yes}\"'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (int rank = 0; rank < 3; ++rank) {
    const std::string line = "rank=" + std::to_string(rank) +
                             " world=3 local=" + std::to_string(rank) +
                             "/3 master=127.0.0.1 launch=yes";
    EXPECT_NE(r.output.find(line), std::string::npos) << r.output;
  }
}

// Each rank writes its lines in pieces (three writes a line, to stdout and to stderr, and a last
// line with no end), both at once: every line arrives whole, after its rank's prefix.
TEST(Launch, EveryLineOfARankArrivesWholeAfterItsRank) {
  const std::string script =
      " -- sh -c 'i=0; while [ $i -lt 200 ]; do printf \"rank %s \" $RANK; "
      "printf \"line %s \" $i; printf \"ABCDEFGH\\n\"; printf \"err %s \" $RANK >&2; "
      "printf \"%s\\n\" $i >&2; i=$((i+1)); done; printf \"tail %s\" $RANK'";
  const auto r = run_loom("launch --nproc-per-node 2" + script);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::istringstream lines(r.output);
  int out[2] = {0, 0}, err[2] = {0, 0}, tails[2] = {0, 0};
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("loom launch:", 0) == 0) continue;
    ASSERT_EQ(line.rfind("[rank ", 0), 0u) << "a line without its rank: '" << line << "'";
    const int rank = line[6] - '0';
    ASSERT_TRUE(rank == 0 || rank == 1) << line;
    const std::string text = line.substr(std::string("[rank 0] ").size());
    const std::string own = std::to_string(rank);
    if (text == "tail " + own) {
      ++tails[rank];
    } else if (text.rfind("err " + own + " ", 0) == 0) {
      EXPECT_EQ(text, "err " + own + " " + std::to_string(err[rank]));
      ++err[rank];
    } else {
      EXPECT_EQ(text, "rank " + own + " line " + std::to_string(out[rank]) + " ABCDEFGH");
      ++out[rank];
    }
  }
  for (int rank : {0, 1}) {
    EXPECT_EQ(out[rank], 200) << rank;
    EXPECT_EQ(err[rank], 200) << rank;
    EXPECT_EQ(tails[rank], 1) << rank;
  }
  // The prefix is a template, and '' leaves the ranks' output as they write it.
  const auto custom = run_loom(
      "launch --nproc-per-node 2 --log-line-prefix '${node}/${local_rank}: '"
      " -- sh -c 'echo \"hello $RANK\"'");
  ASSERT_EQ(custom.exit_code, 0) << custom.output;
  EXPECT_NE(custom.output.find("0/1: hello 1\n"), std::string::npos) << custom.output;
  const auto raw = run_loom("launch --nproc-per-node 1 --log-line-prefix '' -- echo hello");
  ASSERT_EQ(raw.exit_code, 0) << raw.output;
  EXPECT_EQ(raw.output.rfind("hello\n", 0), 0u) << raw.output;
}

// Parameter servers take the last ranks of the job; nodes may start different numbers of
// workers and servers (here a node of one worker, and one of two workers and a server), and
// agree on the layout through node 0's store.
TEST(Launch, ServersTakeTheLastRanksOverNodesOfDifferentShapes) {
  TempDir dir;
  const std::string where = " --nnodes 2 --master 127.0.0.1:" + std::to_string(free_port()) +
                            " -- sh -c 'echo \"rank=$RANK world=$WORLD_SIZE "
                            "local=$LOCAL_RANK/$LOCAL_WORLD_SIZE node=$GROUP_RANK\"'";
  BackgroundProcess second(
      test::loom_binary() + " launch --node-rank 1 --nproc-per-node 2 --servers 1" + where,
      dir / "node1.log");
  const auto first = run_loom("launch --node-rank 0 --nproc-per-node 1" + where);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  ASSERT_EQ(second.wait(), 0) << read_text(dir / "node1.log");
  EXPECT_NE(first.output.find("rank=0 world=4 local=0/1 node=0"), std::string::npos)
      << first.output;
  const std::string node1 = read_text(dir / "node1.log");
  for (const char* line : {"rank=1 world=4 local=0/3 node=1", "rank=2 world=4 local=1/3 node=1",
                           "rank=3 world=4 local=2/3 node=1"}) {
    EXPECT_NE(node1.find(line), std::string::npos) << node1;
  }
  // One node alone: workers first, then its servers.
  const auto single = run_loom(
      "launch --nproc-per-node 2 --servers 2 -- sh -c 'echo \"rank=$RANK world=$WORLD_SIZE\"'");
  ASSERT_EQ(single.exit_code, 0) << single.output;
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_NE(single.output.find("rank=" + std::to_string(rank) + " world=4"), std::string::npos)
        << single.output;
  }
}

// Node 0's ranks end at once while node 1, which joined, reads the layout only later (a testing
// aid holds it back): node 0's launcher serves the store until node 1 is done with it, so node 1
// still runs its ranks. Without the exit barrier node 1 lost the store every time here.
TEST(Launch, NodeZeroServesTheStoreUntilEveryNodeIsDone) {
  TempDir dir;
  const std::string where =
      " --nnodes 2 --join-timeout 60 --master 127.0.0.1:" + std::to_string(free_port()) +
      " -- sh -c 'touch " + dir.path() + "/ran.$RANK'";
  BackgroundProcess second("env LOOM_FAULT_LAUNCH_LATE_LAYOUT_MS=1500 " + test::loom_binary() +
                               " launch --node-rank 1" + where,
                           dir / "node1.log");
  const auto first = run_loom("launch --node-rank 0" + where);
  EXPECT_EQ(first.exit_code, 0) << first.output;
  EXPECT_EQ(second.wait(), 0) << read_text(dir / "node1.log");
  EXPECT_TRUE(std::filesystem::exists(dir / "ran.0"));
  EXPECT_TRUE(std::filesystem::exists(dir / "ran.1")) << read_text(dir / "node1.log");
}

// A node that never joins is named, by node 0 and, through the store, by the nodes that did.
// `loom launch --servers K` is enough: its ranks run with parallel.mode=ps and
// parallel.ps.servers = the job's total, and a configuration that says otherwise is an error
// naming the key and both values.
TEST(Launch, ServersTellEveryRankTheJobsServerCount) {
  TempDir dir;
  const auto r = run_loom("launch --nproc-per-node 1 --servers 2 -- sh -c '" + test::loom_binary() +
                          " config > " + dir.path() + "/config.$RANK'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (int rank = 0; rank < 3; ++rank) {
    const std::string config = read_text(dir / ("config." + std::to_string(rank)));
    const std::string parallel = config.substr(config.find("\nparallel:"));
    EXPECT_NE(parallel.find("\n  mode: ps\n"), std::string::npos) << parallel;
    EXPECT_NE(parallel.find("\n    servers: 2\n"), std::string::npos) << parallel;
  }
  const auto conflict = run_loom("launch --nproc-per-node 1 --servers 1 -- " + test::loom_binary() +
                                 " config --set parallel.ps.servers=3");
  EXPECT_EQ(conflict.exit_code, 2) << conflict.output;
  EXPECT_NE(conflict.output.find("config key 'parallel.ps.servers' is 3 (from --set)"),
            std::string::npos)
      << conflict.output;
  const auto data = run_loom("launch --nproc-per-node 1 --servers 1 -- " + test::loom_binary() +
                             " config --set parallel.mode=data");
  EXPECT_EQ(data.exit_code, 2) << data.output;
  EXPECT_NE(data.output.find("config key 'parallel.mode' is 'data'"), std::string::npos)
      << data.output;
}

TEST(Launch, ANodeThatNeverComesIsNamed) {
  TempDir dir;
  const std::string where =
      " --nnodes 3 --join-timeout 3 --master 127.0.0.1:" + std::to_string(free_port()) + " -- true";
  BackgroundProcess second(test::loom_binary() + " launch --node-rank 1" + where,
                           dir / "node1.log");
  const auto r = run_loom("launch --node-rank 0" + where);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("node(s) 2 of 3"), std::string::npos) << r.output;
  EXPECT_EQ(second.wait(), 1);
  EXPECT_NE(read_text(dir / "node1.log").find("node(s) 2 of 3"), std::string::npos)
      << read_text(dir / "node1.log");
}

// SIGTERM or Ctrl-C ends a launcher at once while it waits for other nodes, rather than after
// --join-timeout: node 0 waiting for node 1 to join, and node 1 waiting for node 0's store.
TEST(Launch, ASignalEndsALauncherWaitingForOtherNodes) {
  TempDir dir;
  const std::string where = " --nnodes 2 --join-timeout 120 --master 127.0.0.1:";
  struct Case {
    std::string args;
    int signal;
  };
  for (const Case& c : {Case{"--node-rank 0" + where + std::to_string(free_port()), SIGTERM},
                        Case{"--node-rank 1" + where + std::to_string(free_port()), SIGINT}}) {
    BackgroundProcess launcher(test::loom_binary() + " launch " + c.args + " -- true",
                               dir / "launcher.log");
    std::this_thread::sleep_for(std::chrono::seconds(1));
    const auto start = std::chrono::steady_clock::now();
    launcher.signal(c.signal);
    EXPECT_EQ(launcher.wait(), 128 + c.signal) << c.args << "\n" << read_text(dir / "launcher.log");
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
              5.0 * kSlowdown)
        << c.args;
  }
}

// The job's secret reaches every rank; the launcher of a node with another secret is refused by
// node 0's store, and a one-node job gets a fresh secret of its own.
TEST(Launch, TheStoreTokenGuardsTheJob) {
  TempDir dir;
  write_text(dir / "token", "the-jobs-secret\n");
  write_text(dir / "other", "someone-else\n");
  // The ranks keep the job's store up until the intruder has been turned away (at most 30 s).
  const std::string where =
      " --nnodes 2 --join-timeout 60 --master 127.0.0.1:" + std::to_string(free_port()) +
      " -- sh -c 'for i in $(seq 300); do grep -q refused " + (dir / "intruder.log") +
      " && break; sleep 0.1; done; echo \"rank=$RANK token=$LOOM_STORE_TOKEN\"'";
  {
    BackgroundProcess intruder(
        test::loom_binary() + " launch --node-rank 1 --token-file " + (dir / "other") + where,
        dir / "intruder.log");
    BackgroundProcess second(
        test::loom_binary() + " launch --node-rank 1 --token-file " + (dir / "token") + where,
        dir / "node1.log");
    const auto first = run_loom("launch --node-rank 0 --token-file " + (dir / "token") + where);
    ASSERT_EQ(first.exit_code, 0) << first.output;
    EXPECT_NE(first.output.find("rank=0 token=the-jobs-secret"), std::string::npos) << first.output;
    ASSERT_EQ(second.wait(), 0) << read_text(dir / "node1.log");
    EXPECT_NE(read_text(dir / "node1.log").find("rank=1 token=the-jobs-secret"), std::string::npos);
    EXPECT_EQ(intruder.wait(), 1);
    EXPECT_NE(read_text(dir / "intruder.log")
                  .find("refused this process: store: refused: wrong "
                        "token"),
              std::string::npos)
        << read_text(dir / "intruder.log");
  }
  const auto single =
      run_loom("launch --nproc-per-node 2 -- sh -c 'echo \"token=${#LOOM_STORE_TOKEN}\"'");
  ASSERT_EQ(single.exit_code, 0) << single.output;
  EXPECT_NE(single.output.find("token=64"), std::string::npos) << single.output;
}

TEST(Launch, PassesSigtermToTheRanks) {
  TempDir dir;
  const auto start = std::chrono::steady_clock::now();
  // Each rank traps SIGTERM and says so; the launcher exits with 128 + 15. The signal goes once
  // both ranks have their trap set and their sleep started: a loaded machine may take a while
  // to start them, and a sleep forked after the signal would hold the output open for 30 s.
  const std::string ready = dir.path() + "/ready.";
  const std::string rank =
      "sh -c 'trap \"echo rank $RANK got TERM; exit 0\" TERM; sleep 30 & touch " + ready +
      "$RANK; wait'";
  const std::string both_ready = "[ -e " + ready + "0 ] && [ -e " + ready + "1 ]";
  const auto r = run_command("(" + test::loom_binary() + " launch --nproc-per-node 2 -- " + rank +
                             " & pid=$!; for i in $(seq 100); do " + both_ready +
                             " && break; sleep 0.1; done; kill -TERM $pid; wait $pid; "
                             "echo \"launcher exit $?\")");
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(r.output.find("launcher exit 143"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rank 0 got TERM"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rank 1 got TERM"), std::string::npos) << r.output;
  EXPECT_LT(seconds, 10.0);
}

TEST(Launch, BadCommandLinesAreConfigErrors) {
  auto r = run_loom("launch --nnodes 2 --node-rank 2 -- true");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--node-rank"), std::string::npos) << r.output;
  r = run_loom("launch --nnodes 2 -- true");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--master"), std::string::npos) << r.output;
  r = run_loom("launch --master localhost:99999 -- true");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--master"), std::string::npos) << r.output;
}

TEST(Launch, RolesNeedAClusterDescriptionAndATrainCommand) {
  TempDir dir;
  auto r = run_loom("launch --roles auto --cluster-config " + (dir / "none.json") + " -- true");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("no cluster description"), std::string::npos) << r.output;
  r = run_loom("launch --data-worker-hosts a,b -- true");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("only with --roles auto"), std::string::npos) << r.output;
  // This host is not a data worker, so it trains: the command must be `loom train`.
  r = run_loom("launch --roles auto --data-worker-hosts not-this-host -- true");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("the command must be `loom train"), std::string::npos) << r.output;
  // A description this host is not in is named.
  write_text(dir / "rc.json",
             R"({"current_host": "algo-9", "instance_groups": [
                 {"instance_group_name": "data_group", "hosts": ["algo-2"]},
                 {"instance_group_name": "dnn_group", "hosts": ["algo-1"]}]})");
  r = run_loom("launch --roles auto --cluster-config " + (dir / "rc.json") + " -- true");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("this host, algo-9, is in no group"), std::string::npos) << r.output;
}

TEST(Launch, CommandThatCannotRunIsNamed) {
  const auto r = run_loom("launch --nproc-per-node 2 -- /nonexistent/program");
  EXPECT_EQ(r.exit_code, 127) << r.output;
  EXPECT_NE(r.output.find("could not be executed"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace loom::test
