// `loom data-worker` with `loom train` as real processes: whatever happens to the workers
// (killed, added late, stalled, gone, corrupting), the run's checkpoint is bit-identical to a
// local-only run; refusals say why.
#include <gtest/gtest.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "e2e/json_output.h"
#include "loom/core/settings.h"
#include "tools/run_compare.h"
#include "tools/test_support.h"

namespace loom {
namespace {

// A `loom data-worker` on 127.0.0.1:`port` serving the temporary directory.
class Worker {
 public:
  Worker(const test::TempDir& dir, const std::string& name, int port, const std::string& extra = "")
      : log_(dir / (name + ".log")),
        address_("127.0.0.1:" + std::to_string(port)),
        // Info lines (sessions, rates) are what the tests read; CTest sets warn.
        process_("env LOOM_LOG_LEVEL=info " + test::loom_binary() + " data-worker --listen " +
                     address_ + " --data-root " + dir.path() + " --threads 1 --report-every 1 " +
                     extra,
                 log_) {
    EXPECT_TRUE(test::wait_for_text(log_, "listening on", 30)) << test::read_text(log_);
  }
  const std::string& address() const { return address_; }
  const std::string& log() const { return log_; }
  test::BackgroundProcess& process() { return process_; }

 private:
  std::string log_, address_;
  test::BackgroundProcess process_;
};

// `config`: a YAML file read before the --set options.
std::string train_args(const std::string& out, const std::string& config = "") {
  return "train " + config + " --out " + out + " " + test::tiny_synthetic_args() +
         " --set data.train_samples=1024 --set train.epochs=2 --set model=mlp";
}

std::string remote_args(const std::vector<std::string>& workers, const std::string& extra = "") {
  std::string list;
  for (const auto& w : workers) list += (list.empty() ? "" : ",") + w;
  return " --set data.remote.workers=" + list +
         " --set data.remote.local_threads=0 --set data.remote.reconnect_s=0.3"
         " --set data.remote.timeout_s=3 " +
         extra;
}

nlohmann::json remote_summary(const std::string& run) {
  return nlohmann::json::parse(test::read_text(run + "/summary.json")).at("data").at("remote");
}

class RemoteWorkers : public ::testing::Test {
 protected:
  // The reference: the same run with local loading only, in dir_/local.
  void train_locally() {
    auto local = test::run_loom(train_args(dir_ / "local"));
    ASSERT_EQ(local.exit_code, 0) << local.output;
  }
  test::TempDir dir_;
};

TEST_F(RemoteWorkers, AKilledWorkerAndALateOneLeaveTheRunBitIdentical) {
  // Blurs make each batch take a worker thread about 40 ms, so the run lasts several seconds and
  // the workers' changes land in the middle of it.
  std::string blurs;
  for (int i = 0; i < 24; ++i) blurs += "    - gaussian_blur: {kernel: 11, sigma: 1.0}\n";
  test::write_text(dir_ / "slow.yaml", "data:\n  transforms:\n" + blurs);
  const std::string slow = dir_ / "slow.yaml",
                    larger = " --set data.image_size=96 --set train.epochs=3";
  auto local = test::run_loom(train_args(dir_ / "local-slow", slow) + larger);
  ASSERT_EQ(local.exit_code, 0) << local.output;

  Worker first(dir_, "first", test::free_port());
  const int second_port = test::free_port();
  const std::string second_address = "127.0.0.1:" + std::to_string(second_port);
  test::BackgroundProcess trainer("env LOOM_LOG_LEVEL=info " + test::loom_binary() + " " +
                                      train_args(dir_ / "remote", slow) + larger +
                                      remote_args({first.address(), second_address}) +
                                      // One fallback thread while no worker is up: slow
                                      // enough that the second worker joins before the end.
                                      " --set data.remote.timeout_s=20 --set data.workers=1",
                                  dir_ / "trainer.log");
  // Once the first worker has served batches, the workers change while the trainer is stopped,
  // so that however loaded the machine is, the change lands mid-run.
  ASSERT_TRUE(test::wait_for_text(first.log(), "batches/s", 60)) << test::read_text(first.log());
  trainer.signal(SIGSTOP);
  first.process().signal(SIGKILL);
  first.process().wait();
  Worker second(dir_, "second", second_port);
  trainer.signal(SIGCONT);
  ASSERT_EQ(trainer.wait(), 0) << test::read_text(dir_ / "trainer.log");
  // The first worker served, then failed and stayed down; the second joined late and served.
  const auto remote = remote_summary(dir_ / "remote");
  ASSERT_EQ(remote.at("workers").size(), 2u) << remote;
  EXPECT_EQ(remote["workers"][0]["address"], first.address()) << remote;
  EXPECT_GT(remote["workers"][0]["batches"].get<int>(), 0) << remote;
  EXPECT_GE(remote["workers"][0]["failures"].get<int>(), 1) << remote;
  EXPECT_EQ(remote["workers"][0]["state"], "down") << remote;
  EXPECT_EQ(remote["workers"][1]["address"], second_address) << remote;
  EXPECT_GT(remote["workers"][1]["batches"].get<int>(), 0) << remote;
  EXPECT_EQ(remote["workers"][1]["state"], "up") << remote;
  test::expect_identical_runs(dir_ / "local-slow", dir_ / "remote");
}

TEST_F(RemoteWorkers, AStalledWorkerIsTimedOutAndNamed) {
  train_locally();
  Worker worker(dir_, "stalled", test::free_port());
  worker.process().signal(SIGSTOP);
  auto run = test::run_loom(train_args(dir_ / "remote") +
                            remote_args({worker.address()}, "--set data.remote.timeout_s=1"));
  worker.process().signal(SIGCONT);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  // The warning names the worker and why.
  EXPECT_NE(run.output.find("data worker " + worker.address() + ": no answer before the timeout"),
            std::string::npos)
      << run.output;
  test::expect_identical_runs(dir_ / "local", dir_ / "remote");
  // It never answered: down, no batch from it, every batch built here.
  const auto remote = remote_summary(dir_ / "remote");
  EXPECT_EQ(remote["workers"][0]["address"], worker.address()) << remote;
  EXPECT_EQ(remote["workers"][0]["state"], "down") << remote;
  EXPECT_EQ(remote["workers"][0]["batches"], 0) << remote;
  EXPECT_EQ(remote["local_batches"], 2 * 1024 / 16) << remote;
}

TEST_F(RemoteWorkers, WithNoWorkerTheRunGoesOnLocallyWithAWarning) {
  train_locally();
  const std::string nowhere = "127.0.0.1:" + std::to_string(test::free_port());
  auto run = test::run_loom(train_args(dir_ / "remote") + remote_args({nowhere}));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  // The warning names the worker and why.
  EXPECT_NE(run.output.find("data worker " + nowhere + ": unreachable"), std::string::npos)
      << run.output;
  test::expect_identical_runs(dir_ / "local", dir_ / "remote");
  const auto remote = remote_summary(dir_ / "remote");
  EXPECT_EQ(remote["workers"][0]["state"], "down") << remote;
  EXPECT_EQ(remote["workers"][0]["batches"], 0) << remote;
  EXPECT_EQ(remote["local_batches"], 2 * 1024 / 16) << remote;  // every batch built here
}

TEST_F(RemoteWorkers, CorruptedBatchesAreAskedForAgain) {
  train_locally();
  Worker worker(dir_, "corrupting", test::free_port(), "--corrupt-every 4");
  auto run = test::run_loom(train_args(dir_ / "remote") + remote_args({worker.address()}));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  test::expect_identical_runs(dir_ / "local", dir_ / "remote");
  EXPECT_GE(remote_summary(dir_ / "remote")["workers"][0]["crc_mismatches"].get<int>(), 1);
}

TEST_F(RemoteWorkers, MetricsTraceAndReportShowEachWorker) {
  Worker worker(dir_, "worker", test::free_port());
  const std::string run_dir = dir_ / "remote";
  auto run = test::run_loom(train_args(run_dir) + remote_args({worker.address()}) +
                            " --set train.log_every=8 --trace");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const nlohmann::json summary = remote_summary(run_dir)["workers"][0];
  EXPECT_EQ(summary["threads"], 1);
  const int64_t batches = summary["batches"].get<int64_t>();
  EXPECT_EQ(batches, 2 * 1024 / 16);  // local_threads=0: every batch came from the worker
  EXPECT_EQ(summary["samples"], 2 * 1024);

  // metrics.jsonl: a data_workers row per log line; their windows add up to the summary.
  int64_t rows = 0, windowed = 0;
  std::istringstream lines(test::read_text(run_dir + "/metrics.jsonl"));
  for (std::string line; std::getline(lines, line);) {
    const nlohmann::json record = nlohmann::json::parse(line);
    if (record["type"] != "data_workers") continue;
    ++rows;
    const nlohmann::json& w = record["workers"][0];
    EXPECT_EQ(w["address"], worker.address());
    windowed += w["batches"].get<int64_t>();
    if (w["batches"].get<int64_t>() > 0) {
      EXPECT_GT(w["samples_per_second"].get<double>(), 0) << line;
      EXPECT_GT(w["mean_latency_s"].get<double>(), 0) << line;
    }
  }
  EXPECT_EQ(rows, batches / 8);
  EXPECT_EQ(windowed, batches);

  // The trace: remote batches on a track named after the worker.
  const nlohmann::json trace = nlohmann::json::parse(test::read_text(run_dir + "/trace.json"));
  int remote_slices = 0;
  bool track_named = false;
  for (const auto& e : trace["traceEvents"]) {
    if (e.value("cat", "") == "remote") {
      ++remote_slices;
      EXPECT_EQ(e["args"]["worker"], worker.address());
    }
    if (e.value("name", "") == "thread_name" &&
        e["args"]["name"] == "data worker " + worker.address()) {
      track_named = true;
    }
  }
  EXPECT_GT(remote_slices, 0);
  EXPECT_TRUE(track_named);

  // The report's worker table: one row for the worker, one for the local threads.
  auto report = test::run_loom("report " + run_dir);
  ASSERT_EQ(report.exit_code, 0) << report.output;
  const std::string browser = test::chromium();
  if (browser.empty()) GTEST_SKIP() << "chromium is not installed: the report table is not drawn";
  const auto dom = test::rendered_dom(browser, run_dir + "/report.html", dir_ / "profile");
  ASSERT_EQ(dom.exit_code, 0) << dom.output;
  const auto at = dom.output.find("<table id=\"worker-table\">");
  ASSERT_NE(at, std::string::npos) << dom.output.substr(0, 2000);
  const std::string table = dom.output.substr(at, dom.output.find("</table>", at) - at);
  EXPECT_EQ(test::count_of(table, "<tr>"), 3) << table;
  EXPECT_NE(table.find(worker.address()), std::string::npos) << table;
  EXPECT_NE(table.find("<td>100.0%</td>"), std::string::npos) << table;
}

TEST_F(RemoteWorkers, ResumeAfterTheTrainerIsKilledIsBitIdentical) {
  train_locally();
  Worker worker(dir_, "worker", test::free_port());
  const std::string args = train_args(dir_ / "remote") + remote_args({worker.address()}) +
                           " --set checkpoint.every_steps=20";
  auto killed = test::run_loom(args, "LOOM_FAULT_STOP_AFTER_STEP=40");
  EXPECT_EQ(killed.signal, SIGKILL) << killed.output;
  auto resumed = test::run_loom(args + " --resume");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  test::expect_identical_runs(dir_ / "local", dir_ / "remote");
}

TEST(RemoteWorkerRefusals, WrongTokenAndDataOutsideTheRootsSaySo) {
  test::TempDir dir;
  test::write_text(dir / "token", "right\n");
  test::write_text(dir / "wrong", "wrong\n");
  Worker worker(dir, "guarded", test::free_port(), "--token-file " + (dir / "token"));
  const std::string base = train_args(dir / "run") + remote_args({worker.address()});
  // A refusal is no error of the command (the run goes on locally): it reaches the user as a log
  // line of the trainer or of the worker, which is what these check.
  auto wrong = test::run_loom(base + " --set data.remote.token_file=" + (dir / "wrong"));
  ASSERT_EQ(wrong.exit_code, 0) << wrong.output;  // the run goes on locally
  EXPECT_NE(wrong.output.find("refused this trainer: wrong or missing token"), std::string::npos)
      << wrong.output;
  const auto refused = remote_summary(dir / "run");
  EXPECT_EQ(refused["workers"][0]["state"], "refused") << refused;
  EXPECT_EQ(refused["workers"][0]["batches"], 0) << refused;
  auto missing = test::run_loom(base + " --set train.epochs=1");
  EXPECT_NE(missing.output.find("it requires a token and data.remote.token_file is not set"),
            std::string::npos)
      << missing.output;
  EXPECT_TRUE(test::wait_for_text(worker.log(), "wrong or missing token", 5));
  EXPECT_NE(test::read_text(worker.log()).find("refused a client from ipv4:127.0.0.1:"),
            std::string::npos);

  // Fashion-MNIST lives outside the worker's root (a temporary directory).
  if (!std::filesystem::exists(setting("LOOM_FASHION_MNIST_DIR"))) {
    GTEST_SKIP() << "Fashion-MNIST (dataset-fashion-mnist) is not installed";
  }
  auto outside = test::run_loom("train --out " + (dir / "fm") +
                                " --set model=mlp --set train.max_steps=2 --set train.eval=false" +
                                remote_args({worker.address()}) +
                                " --set data.remote.token_file=" + (dir / "token"));
  ASSERT_EQ(outside.exit_code, 0) << outside.output;
  EXPECT_NE(outside.output.find("outside this worker's data roots"), std::string::npos)
      << outside.output;
}

TEST(RemoteWorkerRefusals, BadCommandLinesAndAddressesAreConfigErrors) {
  test::TempDir dir;
  auto no_root = test::run_loom("data-worker --listen 127.0.0.1:0");
  EXPECT_EQ(no_root.exit_code, 2) << no_root.output;
  auto bad_address =
      test::run_loom_reporting("data-worker --listen 203.0.113.7:0 --data-root " + dir.path());
  EXPECT_EQ(bad_address.result.exit_code, 1) << bad_address.result.output;
  EXPECT_EQ(bad_address.error["fields"]["problem"], "cannot_listen") << bad_address.error;
  EXPECT_EQ(bad_address.error["fields"]["value"], "203.0.113.7:0") << bad_address.error;
  auto bad_worker = test::run_loom_reporting("train --out " + (dir / "x") +
                                             " --set data.remote.workers=localhost");
  EXPECT_EQ(bad_worker.result.exit_code, 2) << bad_worker.result.output;
  EXPECT_EQ(bad_worker.error["kind"], "config") << bad_worker.error;
  EXPECT_EQ(bad_worker.error["fields"]["key"], "data.remote.workers") << bad_worker.error;
}

}  // namespace
}  // namespace loom
