// Collectives between real processes, started by `loom launch` (and once by hand, torchrun
// style). Every backend is checked against values computed in the worker, shm against tcp,
// and the failure cases (mismatched calls, a dead rank, a stalled rank) must end in errors that
// name the rank, never in a hang. No test may leave a segment in /dev/shm.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <set>

#include "dist/comm_scenarios.h"
#include "tools/test_support.h"

namespace loom::test {
namespace {

// The ranks that printed facts with outcome=passed and these facts too (comm_worker prints one
// facts line per rank).
int ranks_that_passed(const std::string& output, const ErrorFields& expected) {
  int count = 0;
  for (const ErrorFields& facts : facts_in(output)) {
    bool all = facts.count("outcome") && facts.at("outcome") == "passed";
    for (const auto& [key, value] : expected) {
      all = all && facts.count(key) && facts.at(key) == value;
    }
    count += all ? 1 : 0;
  }
  return count;
}

// The facts rank `rank` printed, or none.
ErrorFields facts_of_rank(const std::string& output, int rank) {
  for (const ErrorFields& facts : facts_in(output)) {
    if (facts.count("rank") && facts.at("rank") == std::to_string(rank)) return facts;
  }
  return {};
}

// The fact `key`, "" when there is none.
std::string fact(const ErrorFields& facts, const std::string& key) {
  const auto it = facts.find(key);
  return it == facts.end() ? std::string() : it->second;
}

std::set<std::string> loom_segments() {
  std::set<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm")) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("loom-", 0) == 0) names.insert(name);
  }
  return names;
}

std::string worker(const std::string& args) { return test::comm_worker() + " " + args; }

CommandResult launch(int ranks, const std::string& args) {
  return run_loom("launch --nproc-per-node " + std::to_string(ranks) + " --grace 5 -- " +
                  worker(args));
}

// Ranks started by hand with torchrun's variables, and no launcher to stop the others when one
// fails; rank 0 serves the store. It binds a free port (MASTER_PORT=0) and writes it to a file;
// the others start once it is there. No port is picked in advance, so none can be taken by
// another test in between. The output ends with "rankR exit STATUS" for each rank.
CommandResult by_hand(int ranks, const std::string& args) {
  TempDir dir;
  const std::string port_file = dir / "port";
  const std::string env = "WORLD_SIZE=" + std::to_string(ranks) +
                          " LOCAL_WORLD_SIZE=" + std::to_string(ranks) + " MASTER_ADDR=127.0.0.1";
  std::string script = "(RANK=0 LOCAL_RANK=0 " + env +
                       " MASTER_PORT=0 LOOM_STORE_PORT_FILE=" + port_file + " " + worker(args) +
                       " & rank0=$!; for i in $(seq 600); do [ -s " + port_file +
                       " ] && break; sleep 0.05; done; ";
  for (int r = 1; r < ranks; ++r) {
    const std::string rank = std::to_string(r);
    script += "RANK=" + rank + " LOCAL_RANK=" + rank + " " + env + " MASTER_PORT=$(cat " +
              port_file + ") " + worker(args) + " & rank" + rank + "=$!; ";
  }
  for (int r = 0; r < ranks; ++r) {
    const std::string rank = std::to_string(r);
    script += "wait $rank" + rank + "; echo \"rank" + rank + " exit $?\"; ";
  }
  return run_command(script + ")");
}

CommandResult torchrun_style(const std::string& args) { return by_hand(2, args); }

// Segments that appeared during the test and are still there when all its processes have
// exited leaked. Tests running in parallel make segments too, but theirs vanish within moments
// (as soon as their ranks have mapped them), so a new name is given a few seconds to go.
class Collectives : public ::testing::Test {
 protected:
  void SetUp() override { before_ = loom_segments(); }
  void TearDown() override {
    std::set<std::string> leaked;
    for (int attempt = 0; attempt < 50; ++attempt) {
      leaked.clear();
      for (const auto& name : loom_segments()) {
        if (!before_.count(name)) leaked.insert(name);
      }
      if (leaked.empty()) return;
      ::usleep(200'000);
    }
    ADD_FAILURE() << "a segment was left in /dev/shm: " << *leaked.begin();
  }
  std::set<std::string> before_;
};

TEST_F(Collectives, ShmMatchesReferenceOnTwoRanks) {
  const auto result = launch(2, "collectives shm");
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_EQ(ranks_that_passed(result.output, {{"backend", "shm"}}), 2) << result.output;
}

TEST_F(Collectives, ShmMatchesReferenceOnThreeRanks) {
  const auto result = launch(3, "collectives shm");
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_EQ(ranks_that_passed(result.output, {{"backend", "shm"}}), 3) << result.output;
}

// Parameter servers: two workers and two servers, then three workers and two servers; every
// worker's pull is exactly the closed-form sum, on both transports.
TEST_F(Collectives, ParameterServerExchangeSumsExactly) {
  for (const char* backend : {"shm", "tcp"}) {
    for (int ranks : {4, 5}) {
      const auto result = launch(ranks, std::string("ps ") + backend);
      EXPECT_EQ(result.exit_code, 0) << backend << " " << ranks << "\n" << result.output;
      EXPECT_EQ(ranks_that_passed(result.output, {{"backend", backend}}), ranks) << result.output;
    }
  }
}

// Servers that keep the parameters, SSP with no slack and async, on both transports: every
// worker ends with exactly the closed-form parameters.
TEST_F(Collectives, ParameterServersThatKeepTheParametersAddEveryWorkersMove) {
  for (const char* backend : {"shm", "tcp"}) {
    for (int ranks : {3, 5}) {
      const auto result = launch(ranks, std::string("ps-held ") + backend);
      EXPECT_EQ(result.exit_code, 0) << backend << " " << ranks << "\n" << result.output;
      EXPECT_EQ(ranks_that_passed(result.output, {{"backend", backend}}), ranks) << result.output;
    }
  }
}

TEST_F(Collectives, TcpMatchesReferenceOnTwoRanks) {
  const auto result = launch(2, "collectives tcp");
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_EQ(ranks_that_passed(result.output, {{"backend", "tcp"}}), 2) << result.output;
}

// Three ranks: blocks of uneven sizes, and a ring whose neighbours differ.
TEST_F(Collectives, TcpMatchesReferenceOnThreeRanks) {
  const auto result = launch(3, "collectives tcp");
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_EQ(ranks_that_passed(result.output, {{"backend", "tcp"}}), 3) << result.output;
}

TEST_F(Collectives, HierarchicalMatchesReferenceOnTwoHosts) {
  // Four ranks that believe they are two per host on two hosts: shm inside, tcp between.
  const auto result =
      run_loom("launch --nproc-per-node 4 --grace 5 -- sh -c 'LOOM_HOST_ID=host$((RANK/2)) exec " +
               worker("collectives auto") + "'");
  EXPECT_EQ(result.exit_code, 0) << result.output;
  // "auto" chose the hierarchical communicator: its name is the backend's own.
  EXPECT_EQ(
      ranks_that_passed(result.output, {{"backend", "auto(shm x 2 hosts + tcp)"}, {"hosts", "2"}}),
      4)
      << result.output;
}

TEST_F(Collectives, ShmAgreesWithTcpUnderTorchrunVariables) {
  const auto result = torchrun_style("agree shm");
  EXPECT_NE(result.output.find("rank0 exit 0"), std::string::npos) << result.output;
  EXPECT_EQ(ranks_that_passed(result.output, {{"checks", "3"}}), 2) << result.output;
}

TEST_F(Collectives, MismatchedCallsAreReportedWithBothShapes) {
  for (const std::string backend : {"shm", "tcp"}) {
    const auto result = launch(2, "mismatch " + backend + " 20000");
    EXPECT_NE(result.exit_code, 0) << result.output;
    EXPECT_NE(result.output.find("1024 x Float"), std::string::npos)
        << backend << ": " << result.output;
    EXPECT_NE(result.output.find("2048 x Float"), std::string::npos)
        << backend << ": " << result.output;
    // Every rank that got to say so failed with the communicator's error; the launcher may stop
    // the other before it does.
    const auto all = facts_in(result.output);
    ASSERT_FALSE(all.empty()) << backend << ": " << result.output;
    for (const ErrorFields& facts : all) {
      EXPECT_EQ(fact(facts, "outcome"), "error") << backend << ": " << result.output;
    }
  }
}

TEST_F(Collectives, KilledRankIsNamedByTheLauncher) {
  const auto start = std::chrono::steady_clock::now();
  const auto result = launch(2, "die shm 5000");
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("rank 1 (pid"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("killed by signal 9 (SIGKILL)"), std::string::npos) << result.output;
  EXPECT_LT(seconds, 15.0 * kSlowdown);
}

TEST_F(Collectives, SurvivorsOfAKilledRankExitWithinTheTimeout) {
  for (const std::string backend : {"shm", "tcp"}) {
    const auto start = std::chrono::steady_clock::now();
    const auto result = torchrun_style("die " + backend + " 5000");
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_NE(result.output.find("rank0 exit 1"), std::string::npos)
        << backend << ": " << result.output;
    EXPECT_EQ(fact(facts_of_rank(result.output, 0), "peer_rank"), "1")
        << backend << ": " << result.output;
    EXPECT_LT(seconds, 5.0 + 10.0) << backend;
  }
}

// A rank killed while a large all-reduce moves: both of its ring neighbours see the connection
// end and name it, at once (the timeout is far off), and so does the rank beyond them.
TEST_F(Collectives, ARankKilledMidCollectiveIsNamedByEveryOtherRank) {
  const auto start = std::chrono::steady_clock::now();
  const auto result = by_hand(4, "die-mid tcp 60000");
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (int rank : {0, 2, 3}) {
    EXPECT_NE(result.output.find("rank" + std::to_string(rank) + " exit 1"), std::string::npos)
        << result.output;
    const auto at = result.output.find("rank " + std::to_string(rank) + ": ");
    ASSERT_NE(at, std::string::npos) << rank << ": " << result.output;
    const std::string line = result.output.substr(at, result.output.find('\n', at) - at);
    EXPECT_NE(line.find("rank 1 "), std::string::npos) << line;
    // It failed with an error: the all-reduce did not finish as if rank 1 were there.
    EXPECT_EQ(fact(facts_of_rank(result.output, rank), "outcome"), "error") << result.output;
  }
  EXPECT_LT(seconds, 30.0 * kSlowdown);
}

TEST_F(Collectives, AStalledParameterServerIsNamed) {
  for (const std::string backend : {"shm", "tcp"}) {
    const auto result = torchrun_style("ps-stall " + backend + " 2000");
    EXPECT_NE(result.output.find("rank0 exit 1"), std::string::npos)
        << backend << ": " << result.output;
    EXPECT_NE(result.output.find("with server 0"), std::string::npos)
        << backend << ": " << result.output;
  }
}

TEST_F(Collectives, StalledRankIsNamedInTheTimeout) {
  for (const std::string backend : {"shm", "tcp"}) {
    const auto result = torchrun_style("stall " + backend + " 2000");
    EXPECT_NE(result.output.find("rank0 exit 1"), std::string::npos)
        << backend << ": " << result.output;
    // Rank 0's own error names rank 1.
    const ErrorFields facts = facts_of_rank(result.output, 0);
    EXPECT_EQ(fact(facts, "kind"), "timeout") << backend << ": " << result.output;
    EXPECT_EQ(fact(facts, "peer_rank"), "1") << backend << ": " << result.output;
  }
}

}  // namespace
}  // namespace loom::test
