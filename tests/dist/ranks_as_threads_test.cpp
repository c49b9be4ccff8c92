// The communication scenarios of collectives_test again, with every rank a thread of this
// process around an in-process store server, as Gloo's tests run theirs: no process start-up, and
// no port picked in advance (the store binds port 0 and says which it got), so nothing can race
// another test for a port. What only processes show (a rank killed, the launcher naming it,
// torchrun's variables) stays in collectives_test.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "dist/comm_scenarios.h"
#include "loom/comm/store_server.h"
#include "loom/core/device.h"

namespace loom::test {
namespace {

std::vector<ScenarioResult> run_ranks(int world, const std::string& scenario,
                                      const std::string& backend, int timeout_ms = 30000,
                                      const std::string& device = "cpu") {
  const std::string token = "ranks-as-threads";
  comm::StoreServer store("127.0.0.1", 0, comm::StoreServerOptions{token});
  ScenarioOptions options;
  options.scenario = scenario;
  options.backend = backend;
  options.comm.timeout = std::chrono::milliseconds(timeout_ms);
  options.max_elements = 70001;  // the processes' test goes up to 64 MB
  options.device = device;
  std::vector<ScenarioResult> results(static_cast<size_t>(world));
  std::vector<std::thread> ranks;
  for (int r = 0; r < world; ++r) {
    comm::WorldInfo info;
    info.rank = info.local_rank = r;
    info.world = info.local_world = world;
    info.master_addr = "127.0.0.1";
    info.master_port = store.port();
    info.launcher = "threads";
    info.store_served_by_launcher = true;
    info.store_token = token;
    ranks.emplace_back([&results, &options, info] {
      results[static_cast<size_t>(info.rank)] = run_scenario(info, options);
    });
  }
  for (auto& rank : ranks) rank.join();
  return results;
}

std::string all_messages(const std::vector<ScenarioResult>& results) {
  std::string text;
  for (const auto& r : results) text += r.message + "\n";
  return text;
}

// The fact `key` of a rank's result, "" when there is none.
std::string fact(const ScenarioResult& result, const std::string& key) {
  const auto it = result.facts.find(key);
  return it == result.facts.end() ? std::string() : it->second;
}

void expect_all_passed(const std::vector<ScenarioResult>& results, const std::string& backend) {
  for (const auto& r : results) {
    EXPECT_EQ(r.exit_code, 0) << all_messages(results);
    EXPECT_EQ(fact(r, "outcome"), "passed") << r.message;
    EXPECT_EQ(fact(r, "backend"), backend) << r.message;
  }
}

TEST(RanksAsThreads, EveryCollectiveMatchesTheReference) {
  for (const std::string backend : {"shm", "tcp"}) {
    for (int world : {2, 3}) {
      SCOPED_TRACE(backend + " x " + std::to_string(world));
      expect_all_passed(run_ranks(world, "collectives", backend), backend);
    }
  }
}

// Through copies in host memory, as a GPU's tensors go over comm.backend's cuda:host; here the
// staging copies CPU tensors, which then take the GPU's path.
TEST(RanksAsThreads, CollectivesStagedThroughHostMemoryMatchTheReference) {
  for (const std::string backend : {"shm", "tcp"}) {
    SCOPED_TRACE(backend);
    expect_all_passed(run_ranks(2, "staged", backend), backend + " via host");
  }
}

bool have_gpu() { return cuda_availability().devices > 0; }

// Two ranks sharing one GPU: NCCL drives one GPU per rank, so comm.backend's cuda:auto moves
// the GPU's tensors through host memory.
TEST(RanksAsThreads, OnAGpuTwoRanksSharingItMoveItsTensorsThroughTheHost) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device: " << cuda_availability().why_not;
  for (const std::string backend : {"shm", "tcp"}) {
    SCOPED_TRACE(backend);
    expect_all_passed(run_ranks(2, "collectives", backend, 30000, "cuda:0"),
                      "cpu:" + backend + ",cuda:" + backend + " via host");
  }
}

// NCCL at a world of one, through every collective. Without a GPU the NCCL module still loads,
// registers itself and refuses by name: the CUDA path compiles, links and loads on every host.
TEST(RanksAsThreads, NcclAtAWorldOfOne) {
  const auto results = run_ranks(1, "collectives", "cpu:tcp,cuda:nccl", 30000, "cuda:0");
  if (have_gpu()) {
    expect_all_passed(results, "cpu:tcp,cuda:nccl");
  } else if (LOOM_HAVE_NCCL_MODULE) {
    EXPECT_EQ(fact(results[0], "kind"), "comm") << results[0].message;
    EXPECT_EQ(fact(results[0], "problem"), "no_cuda") << results[0].message;
  } else {
    EXPECT_EQ(fact(results[0], "kind"), "config") << results[0].message;
    EXPECT_EQ(fact(results[0], "problem"), "unusable") << results[0].message;
  }
}

TEST(RanksAsThreads, PipelineMessagesArriveWithTheirHeaders) {
  for (const std::string backend : {"shm", "tcp"}) {
    for (int world : {2, 3}) {
      SCOPED_TRACE(backend + " x " + std::to_string(world));
      expect_all_passed(run_ranks(world, "messages", backend), backend);
    }
  }
}

// A pipeline's activations and gradients between two ranks sharing a GPU: the bytes are the
// GPU's tensors, staged through host memory by comm.backend's cuda:host, and land on the GPU.
TEST(RanksAsThreads, OnAGpuPipelineMessagesStayOnIt) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device: " << cuda_availability().why_not;
  expect_all_passed(run_ranks(2, "messages", "shm", 30000, "cuda:0"), "cpu:shm,cuda:shm via host");
}

TEST(RanksAsThreads, ShmAgreesWithTcp) {
  const auto results = run_ranks(2, "agree", "shm");
  for (const auto& r : results) {
    EXPECT_EQ(r.exit_code, 0) << all_messages(results);
    EXPECT_EQ(fact(r, "outcome"), "passed") << r.message;
    EXPECT_EQ(fact(r, "checks"), "3") << r.message;
  }
}

// Groups over some ranks (not contiguous ones), made twice under one name; a group of one rank.
TEST(RanksAsThreads, GroupsOfSomeRanksMatchTheReference) {
  for (const std::string backend : {"shm", "tcp"}) {
    for (int world : {3, 4}) {
      SCOPED_TRACE(backend + " x " + std::to_string(world));
      expect_all_passed(run_ranks(world, "groups", backend), backend);
    }
  }
}

TEST(RanksAsThreads, ParameterServersSumExactly) {
  for (const std::string backend : {"shm", "tcp"}) {
    SCOPED_TRACE(backend);
    expect_all_passed(run_ranks(4, "ps", backend), backend);
    expect_all_passed(run_ranks(3, "ps-held", backend), backend);
  }
}

TEST(RanksAsThreads, MismatchedCallsAreReportedWithBothShapes) {
  for (const std::string backend : {"shm", "tcp"}) {
    const auto results = run_ranks(2, "mismatch", backend, 5000);
    const std::string text = all_messages(results);
    for (const auto& r : results) EXPECT_EQ(r.exit_code, 1) << backend << ": " << text;
    EXPECT_NE(text.find("1024 x Float"), std::string::npos) << backend << ": " << text;
    EXPECT_NE(text.find("2048 x Float"), std::string::npos) << backend << ": " << text;
    int named_the_mismatch = 0;
    for (const auto& r : results) {
      EXPECT_EQ(fact(r, "outcome"), "error") << backend << ": " << text;
      named_the_mismatch += fact(r, "problem") == "calls_out_of_step" ? 1 : 0;
    }
    EXPECT_GE(named_the_mismatch, 1) << backend << ": " << text;
  }
}

TEST(RanksAsThreads, AStalledRankIsNamedInTheTimeout) {
  for (const std::string backend : {"shm", "tcp"}) {
    const auto results = run_ranks(2, "stall", backend, 2000);
    EXPECT_EQ(results[0].exit_code, 1) << backend << ": " << all_messages(results);
    EXPECT_EQ(fact(results[0], "kind"), "timeout") << backend << ": " << results[0].message;
    EXPECT_EQ(fact(results[0], "peer_rank"), "1") << backend << ": " << results[0].message;
  }
}

// Two workers and two servers; the last rank, server 1, sleeps.
TEST(RanksAsThreads, AStalledParameterServerIsNamed) {
  for (const std::string backend : {"shm", "tcp"}) {
    const auto results = run_ranks(4, "ps-stall", backend, 2000);
    EXPECT_EQ(results[0].exit_code, 1) << backend << ": " << all_messages(results);
    EXPECT_NE(results[0].message.find("with server 1"), std::string::npos)
        << backend << ": " << results[0].message;
  }
}

}  // namespace
}  // namespace loom::test
