// Across hosts, on one machine: network namespaces joined by rate-limited veth links
// (scripts/netbed.sh). A trainer on one host fed by a data worker on another, and data
// parallelism over tcp between two hosts. Skipped, saying why, where namespaces cannot be made.
#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "tools/run_compare.h"
#include "tools/test_support.h"

namespace loom {
namespace {

const std::string kBed = test::source_dir() + "/scripts/netbed.sh";

class NetBed : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto check = test::run_command(kBed + " check");
    if (check.exit_code != 0) GTEST_SKIP() << check.output;
    made_ = true;  // from here on, TearDown removes whatever exists of the bed
    const auto up =
        test::run_command(kBed + " up " + name_ + " " + std::to_string(hosts_) + " 1gbit");
    ASSERT_EQ(up.exit_code, 0) << up.output;
  }
  void TearDown() override {
    if (made_) test::run_command(kBed + " down " + name_);
  }
  // COMMAND (words, no shell syntax) run on host `host` (1 or 2).
  std::string on(int host, const std::string& command) const {
    return kBed + " exec " + name_ + " " + std::to_string(host) + " " + command;
  }
  static std::string address(int host) { return "10.213.0." + std::to_string(host); }

  std::string host_name(int host) const { return name_ + "-h" + std::to_string(host); }

  int hosts_ = 2;
  std::string name_ = "lt" + std::to_string(::getpid());
  bool made_ = false;
  test::TempDir dir_;
};

std::string train_args(const std::string& out) {
  return "train --out " + out + " " + test::tiny_synthetic_args() +
         " --set model=mlp --set model.dropout=0 --set runtime.precision=fp32 "
         "--set train.epochs=2";
}

TEST_F(NetBed, ADataWorkerOnAnotherHostFeedsTheTrainerBitIdentically) {
  auto local = test::run_loom(train_args(dir_ / "local"));
  ASSERT_EQ(local.exit_code, 0) << local.output;
  const std::string worker_address = address(2) + ":7311";
  test::BackgroundProcess worker(
      on(2, "env LOOM_LOG_LEVEL=info " + test::loom_binary() + " data-worker --listen " +
                worker_address + " --data-root " + dir_.path() + " --threads 1"),
      dir_ / "worker.log");
  ASSERT_TRUE(test::wait_for_text(dir_ / "worker.log", "listening on", 30))
      << test::read_text(dir_ / "worker.log");
  auto remote = test::run_command(on(1, test::loom_binary() + " " + train_args(dir_ / "remote") +
                                            " --set data.remote.workers=" + worker_address +
                                            " --set data.remote.local_threads=0"));
  ASSERT_EQ(remote.exit_code, 0) << remote.output;
  test::expect_identical_runs(dir_ / "local", dir_ / "remote");
  const auto summary = nlohmann::json::parse(test::read_text(dir_ / "remote/summary.json"));
  const auto& w = summary["data"]["remote"]["workers"][0];
  EXPECT_EQ(w["address"], worker_address);
  EXPECT_GT(w["batches"].get<int>(), 0) << summary["data"]["remote"];
  // The worker logged who connected: the trainer's host address.
  EXPECT_NE(test::read_text(dir_ / "worker.log").find("(ipv4:" + address(1) + ":"),
            std::string::npos)
      << test::read_text(dir_ / "worker.log");
}

// A trainer host and two CPU hosts, as a SageMaker heterogeneous cluster describes them.
class HeterogeneousCluster : public NetBed {
 protected:
  HeterogeneousCluster() { hosts_ = 3; }

  // resourceconfig.json as SageMaker writes it on host `host`.
  std::string describe_for(int host) {
    const std::string path = dir_ / ("resourceconfig-" + std::to_string(host) + ".json");
    test::write_text(path, R"({"current_group_name": ")" +
                               std::string(host == 1 ? "dnn_group" : "data_group") +
                               R"(", "current_host": ")" + host_name(host) + R"(",
      "current_instance_type": "ml.c5.xlarge",
      "hosts": [")" + host_name(1) +
                               R"(", ")" + host_name(2) + R"(", ")" + host_name(3) + R"("],
      "instance_groups": [
        {"hosts": [")" + host_name(1) +
                               R"("], "instance_group_name": "dnn_group",
         "instance_type": "ml.g5.xlarge"},
        {"hosts": [")" + host_name(2) +
                               R"(", ")" + host_name(3) + R"("],
         "instance_group_name": "data_group", "instance_type": "ml.c5.xlarge"}],
      "network_interface_name": "eth0"})");
    return path;
  }
};

TEST_F(HeterogeneousCluster, TheSameLaunchOnEveryHostFindsItsRole) {
  auto local = test::run_loom(train_args(dir_ / "local"));
  ASSERT_EQ(local.exit_code, 0) << local.output;
  // The one command every host runs; only the description differs (current_host).
  auto launch = [&](int host) {
    return on(host, "env LOOM_LOG_LEVEL=info " + test::loom_binary() +
                        " launch --roles auto --cluster-config " + describe_for(host) +
                        " --data-root " + dir_.path() +
                        " --data-port 7312 --data-threads 1 --exit-when-idle 2 -- " +
                        test::loom_binary() + " " + train_args(dir_ / "remote") +
                        " --set data.remote.local_threads=0");
  };
  test::BackgroundProcess worker2(launch(2), dir_ / "worker2.log");
  test::BackgroundProcess worker3(launch(3), dir_ / "worker3.log");
  for (const char* log : {"worker2.log", "worker3.log"}) {
    ASSERT_TRUE(test::wait_for_text(dir_ / log, "listening on", 30)) << test::read_text(dir_ / log);
  }
  const auto trainer = test::run_command(launch(1));
  ASSERT_EQ(trainer.exit_code, 0) << trainer.output;

  // Host 1 trained, alone (one rank), and both other hosts served it as data workers, by name;
  // the run is the local one bit for bit.
  const auto summary = nlohmann::json::parse(test::read_text(dir_ / "remote/summary.json"));
  EXPECT_EQ(summary["data_parallel"]["ranks"], 1);
  const auto& workers = summary["data"]["remote"]["workers"];
  ASSERT_EQ(workers.size(), 2u) << summary["data"]["remote"];
  int64_t batches = 0;
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(workers[i]["address"], host_name(i + 2) + ":7312");
    EXPECT_GT(workers[i]["batches"].get<int64_t>(), 0) << summary["data"]["remote"];
    batches += workers[i]["batches"].get<int64_t>();
  }
  EXPECT_EQ(batches + summary["data"]["remote"]["local_batches"].get<int64_t>(), summary["steps"]);
  test::expect_identical_runs(dir_ / "local", dir_ / "remote");
  // With the trainer gone, the workers end on their own.
  for (const char* log : {"worker2.log", "worker3.log"}) {
    EXPECT_TRUE(test::wait_for_text(dir_ / log, "no trainer asked for anything", 30))
        << test::read_text(dir_ / log);
  }
  EXPECT_EQ(worker2.wait(), 0);
  EXPECT_EQ(worker3.wait(), 0);
}

TEST_F(NetBed, DataParallelAcrossTwoHostsTrainsLikeOneProcess) {
  auto one = test::run_loom(train_args(dir_ / "one") + " --set data.batch_size=32");
  ASSERT_EQ(one.exit_code, 0) << one.output;
  auto node = [&](int rank) {
    // Node 0's ranks listen where LOOM_COMM_HOST says; node 1's find their address by the
    // route to the store (the machine's hostname resolves outside the bed).
    const std::string listen = rank == 0 ? "env LOOM_COMM_HOST=" + address(1) + " " : "";
    return on(rank + 1, listen + test::loom_binary() + " launch --nproc-per-node 1 --nnodes 2 " +
                            "--node-rank " + std::to_string(rank) + " --master " + address(1) +
                            ":7312 -- " + test::loom_binary() + " " + train_args(dir_ / "two") +
                            " --set data.global_batch=32");
  };
  test::BackgroundProcess second(node(1), dir_ / "node1.log");
  auto first = test::run_command(node(0));
  EXPECT_EQ(second.wait(), 0) << test::read_text(dir_ / "node1.log");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const auto a = nlohmann::json::parse(test::read_text(dir_ / "one/summary.json"));
  const auto b = nlohmann::json::parse(test::read_text(dir_ / "two/summary.json"));
  EXPECT_EQ(b["data_parallel"]["ranks"], 2);
  EXPECT_EQ(b["data_parallel"]["backend"], "tcp");
  EXPECT_EQ(a["steps"], b["steps"]);
  EXPECT_NEAR(b["final_train_loss"].get<double>(), a["final_train_loss"].get<double>(),
              1e-4 * a["final_train_loss"].get<double>());
  EXPECT_NEAR(b["test_loss"].get<double>(), a["test_loss"].get<double>(),
              1e-4 * a["test_loss"].get<double>());
}

// `loom bench comm --backends tcp` between hosts, as bench/comm_between_hosts.py runs it: every
// size asked for, timed on tcp alone (shm cannot reach the other host).
TEST_F(NetBed, BenchCommTimesTcpBetweenHosts) {
  const std::string json = dir_ / "comm.json";
  auto node = [&](int rank) {
    return on(rank + 1, test::loom_binary() + " launch --nproc-per-node 1 --nnodes 2 " +
                            "--node-rank " + std::to_string(rank) + " --master " + address(1) +
                            ":7313 -- " + test::loom_binary() +
                            " bench comm --quick --backends tcp --dtypes float32 --sizes 4K,1M "
                            "--json " +
                            json);
  };
  test::BackgroundProcess second(node(1), dir_ / "node1.log");
  auto first = test::run_command(node(0));
  EXPECT_EQ(second.wait(), 0) << test::read_text(dir_ / "node1.log");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const auto result = nlohmann::json::parse(test::read_text(json));
  EXPECT_EQ(result["world"], 2);
  ASSERT_EQ(result["rows"].size(), 2u) << result.dump(2);
  std::vector<std::int64_t> sizes;
  for (const auto& row : result["rows"]) {
    EXPECT_EQ(row["backend"], "tcp");
    EXPECT_EQ(row["dtype"], "Float");
    EXPECT_GE(row["repeats"].get<int>(), 3);
    EXPECT_GT(row["median_seconds"].get<double>(), 0);
    sizes.push_back(row["bytes"].get<std::int64_t>());
  }
  EXPECT_EQ(sizes, (std::vector<std::int64_t>{4096, 1 << 20}));
}

}  // namespace
}  // namespace loom
