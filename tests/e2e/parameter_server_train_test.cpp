// `loom launch --nproc-per-node N --servers K -- loom train --set parallel.mode=ps`: the user's
// view of parameter servers. Synchronous servers must train exactly like all-reduce and like one
// process on the same global batch; the servers' loads must stay within one part of each other;
// a checkpoint must move between modes; and a lost server or a worker whose parts differ must
// end the run with an error naming it, not a hang.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "e2e/json_output.h"
#include "loom/core/settings.h"
#include "tools/run_compare.h"
#include "tools/test_support.h"

namespace loom::test {
namespace {

// fp32 and no dropout; buckets and parts small enough that the MLP's gradients make many parts
// over several buckets, so parts end mid-bucket and every server gets some of each.
std::string exact_args() {
  return tiny_synthetic_args() +
         " --set model=mlp --set model.dropout=0 --set runtime.precision=fp32"
         " --set train.epochs=2 --set parallel.first_bucket_mb=0.02"
         " --set parallel.bucket_cap_mb=0.1 --set parallel.ps.part_mb=0.03";
}

// Every server rank in `ranks` has a process track in the merged trace with `spans` spans named
// `name`.
void expect_server_spans(const std::string& trace_path, const std::vector<int>& ranks,
                         const std::string& name, int spans) {
  const auto trace = nlohmann::json::parse(read_text(trace_path));
  for (int rank : ranks) {
    int tracks = 0, found = 0;
    for (const auto& e : trace["traceEvents"]) {
      if (e["pid"] != rank) continue;
      if (e["name"] == "process_name" &&
          e["args"]["name"].get<std::string>().rfind("parameter server", 0) == 0) {
        ++tracks;
      }
      if (e["name"] == name && e.value("cat", "") == "ps") ++found;
    }
    EXPECT_EQ(tracks, 1) << "rank " << rank << " in " << trace_path;
    EXPECT_EQ(found, spans) << name << " of rank " << rank << " in " << trace_path;
  }
}

std::string ps_args(int servers) {
  return " --set parallel.mode=ps --set parallel.ps.servers=" + std::to_string(servers);
}

std::string launch(int workers, int servers, const std::string& args) {
  return "launch --nproc-per-node " + std::to_string(workers) + " --servers " +
         std::to_string(servers) + " -- " + test::loom_binary() + " train " + args;
}

TEST(ParameterServerTrain, SyncServersTrainLikeAllReduceAndLikeOneProcess) {
  TempDir dir;
  const std::string args = exact_args() + " --set data.global_batch=32";
  const auto single =
      run_loom("train " + exact_args() + " --set data.batch_size=32 --out " + (dir / "one"));
  ASSERT_EQ(single.exit_code, 0) << single.output;
  const auto ring = run_loom(launch(2, 0, args + " --out " + (dir / "ring")));
  ASSERT_EQ(ring.exit_code, 0) << ring.output;
  const auto ps = run_loom(launch(2, 2, args + ps_args(2) + " --trace --out " + (dir / "ps")));
  ASSERT_EQ(ps.exit_code, 0) << ps.output;

  expect_same_model(dir / "ps", dir / "ring", 1e-5);
  expect_same_model(dir / "ps", dir / "one", 1e-5);
  const auto summary = summary_of(dir / "ps");
  EXPECT_EQ(summary["steps"], summary_of(dir / "one")["steps"]);
  EXPECT_EQ(summary["data_parallel"]["ranks"], 2);
  EXPECT_EQ(summary["data_parallel"]["backend"], "shm");
  // Both servers served every step, with loads within one part of each other.
  const auto& servers = summary["parameter_servers"];
  ASSERT_TRUE(servers.is_object()) << summary.dump(2);
  EXPECT_EQ(servers["servers"], 2) << servers.dump(2);
  EXPECT_EQ(servers["workers"], 2) << servers.dump(2);
  ASSERT_EQ(servers["per_server"].size(), 2u) << servers.dump(2);
  for (const auto& server : servers["per_server"]) {
    EXPECT_EQ(server["steps"], summary["steps"]) << servers.dump(2);
    EXPECT_GT(server["bytes_in"].get<double>(), 0) << servers.dump(2);
    EXPECT_EQ(server["bytes_in"], server["bytes_out"]) << servers.dump(2);
    EXPECT_GT(server["busy_seconds"].get<double>(), 0) << servers.dump(2);
  }
  EXPECT_LE(servers["bytes_spread_parts"].get<double>(), 1.0) << servers.dump(2);
  // metrics.jsonl follows the servers through the run; the summary has every worker's compute.
  int rows = 0;
  std::istringstream lines(read_text(dir / "ps/metrics.jsonl"));
  for (std::string line; std::getline(lines, line);) {
    const auto record = nlohmann::json::parse(line);
    if (record["type"] != "parameter_servers") continue;
    ++rows;
    ASSERT_EQ(record["servers"].size(), 2u) << line;
    for (const auto& server : record["servers"]) {
      EXPECT_GT(server["bytes_in_per_second"].get<double>(), 0) << line;
      EXPECT_GT(server["active"].get<double>(), 0) << line;
      EXPECT_LE(server["active"].get<double>(), 1.0) << line;
      EXPECT_GE(server["busy"].get<double>(), 0) << line;
    }
  }
  EXPECT_GE(rows, 1);
  EXPECT_EQ(summary["data_parallel"]["worker_compute_seconds"].size(), 2u) << summary.dump(2);
  // The report draws a row per server.
  const auto report = run_loom("report " + (dir / "ps"));
  ASSERT_EQ(report.exit_code, 0) << report.output;
  if (const std::string browser = chromium(); !browser.empty()) {
    const auto dom = rendered_dom(browser, dir / "ps/report.html", dir / "profile");
    ASSERT_EQ(dom.exit_code, 0) << dom.output;
    const auto at = dom.output.find("<table id=\"server-table\">");
    ASSERT_NE(at, std::string::npos) << dom.output.substr(0, 2000);
    const std::string table = dom.output.substr(at, dom.output.find("</table>", at) - at);
    EXPECT_EQ(count_of(table, "<tr>"), 3) << table;
    EXPECT_NE(table.find("busy (CPU)"), std::string::npos) << table;
  }
  // The trace has a track per server (ranks 2 and 3, named "parameter server N" by the server
  // loop) with a span per traced step (profile.trace_active: 10).
  expect_server_spans(dir / "ps/trace.json", {2, 3}, "serve step", 10);
  // Rank 0 reported for the workers.
  EXPECT_EQ(count_of(ps.output, "summary:"), 1) << ps.output;
}

// Accumulated micro-batches exchange once per step, and bf16 parts are summed in fp32 and
// rounded once, as the all-reduce does.
TEST(ParameterServerTrain, CompressedAccumulatedGradientsMatchAllReduce) {
  TempDir dir;
  const std::string args = exact_args() +
                           " --set data.global_batch=16 --set train.grad_accum=2"
                           " --set parallel.compression=bf16 --out ";
  const auto ring = run_loom(launch(2, 0, args + (dir / "ring")));
  ASSERT_EQ(ring.exit_code, 0) << ring.output;
  const auto ps = run_loom(launch(2, 2, args + (dir / "ps") + ps_args(2)));
  ASSERT_EQ(ps.exit_code, 0) << ps.output;
  expect_same_model(dir / "ps", dir / "ring", 1e-5);
  const auto summary = summary_of(dir / "ps");
  EXPECT_EQ(summary["parameter_servers"]["servers"], 2) << summary.dump(2);
  EXPECT_EQ(summary["data_parallel"]["backend"], "shm");
  EXPECT_TRUE(summary_of(dir / "ring")["parameter_servers"].is_null());
}

TEST(ParameterServerTrain, ACheckpointMovesBetweenServersAndAllReduce) {
  TempDir dir;
  const std::string args =
      exact_args() + " --set data.global_batch=32 --set checkpoint.every_steps=4 --out ";
  const auto straight = run_loom(launch(2, 2, args + (dir / "straight") + ps_args(2)));
  ASSERT_EQ(straight.exit_code, 0) << straight.output;
  // Preempted after step 8 under servers, after step 16 under all-reduce, finished under one
  // server.
  const auto first =
      run_loom(launch(2, 2, args + (dir / "moved") + ps_args(2)), "LOOM_FAULT_STOP_AFTER_STEP=8");
  EXPECT_NE(first.exit_code, 0) << first.output;
  const auto second =
      run_loom(launch(2, 0, args + (dir / "moved") + " " + kDefaultsOnly + " --resume"),
               "LOOM_FAULT_STOP_AFTER_STEP=16");
  EXPECT_NE(second.exit_code, 0) << second.output;
  const auto third = run_loom(
      launch(2, 1, args + (dir / "moved") + ps_args(1) + " " + kDefaultsOnly + " --resume"));
  ASSERT_EQ(third.exit_code, 0) << third.output;
  EXPECT_EQ(summary_of(dir / "moved")["resumed_from_step"], 16);
  expect_same_model(dir / "moved", dir / "straight", 1e-5);
}

TEST(ParameterServerTrain, WorkersWhosePartsDifferAreRefusedNamingThem) {
  TempDir dir;
  // Worker rank 1 cuts its gradients into other parts than worker rank 0.
  const std::string command =
      "launch --nproc-per-node 2 --servers 1 --grace 2 -- sh -c 'exec " + test::loom_binary() +
      " train " + exact_args() + ps_args(1) + " --set comm.timeout_s=60" +
      " --set parallel.ps.part_mb=$([ $RANK = 1 ] && echo 0.05 || echo 0.03) --out " + dir.path() +
      "'";
  const auto start = std::chrono::steady_clock::now();
  const auto result = run_loom(command);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("worker rank 1 sent step 0"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("mismatched part plans"), std::string::npos) << result.output;
  EXPECT_LT(seconds, 50) << "found only by a timeout:\n" << result.output;
}

// Two launchers as two nodes over tcp: the workers' node and a servers-only node, where server
// 0 SIGKILLs itself after `kill_after` steps. The workers must fail on their own, naming it.
struct KilledServerRun {
  CommandResult workers;
  double seconds = 0;
  int servers_exit = 0;
  std::string servers_log;
};
KilledServerRun run_until_a_server_dies(const TempDir& dir, const std::string& args, int servers,
                                        int timeout_s, int kill_after) {
  const int port = free_port();
  const std::string common = " --nnodes 2 --master 127.0.0.1:" + std::to_string(port) +
                             " --grace 2 -- " + test::loom_binary() + " train " + exact_args() +
                             args +
                             " --set train.epochs=50 --set comm.backend=tcp"
                             " --set comm.timeout_s=" +
                             std::to_string(timeout_s) + ps_args(servers) + " --out " + dir.path();
  BackgroundProcess server_node(
      "env LOOM_HOST_ID=servers LOOM_FAULT_KILL_SERVER_AFTER_STEP=" + std::to_string(kill_after) +
          " " + test::loom_binary() + " launch --node-rank 1 --nproc-per-node 0 --servers " +
          std::to_string(servers) + common,
      dir / "servers.log");
  KilledServerRun run;
  const auto start = std::chrono::steady_clock::now();
  run.workers =
      run_loom("launch --node-rank 0 --nproc-per-node 2" + common, "LOOM_HOST_ID=workers");
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  run.servers_exit = server_node.wait();
  run.servers_log = read_text(dir / "servers.log");
  return run;
}

TEST(ParameterServerTrain, AKilledServerIsNamedByTheWorkersOnAnotherNode) {
  TempDir dir;
  const KilledServerRun run = run_until_a_server_dies(dir, "", 2, 20, 3);
  EXPECT_NE(run.workers.exit_code, 0) << run.workers.output;
  EXPECT_NE(run.workers.output.find("server 0 (rank 2 on host "), std::string::npos)
      << run.workers.output;
  EXPECT_LT(run.seconds, 20 + 10 + 15) << run.workers.output;  // start-up and 3 steps: < 15 s
  EXPECT_NE(run.servers_exit, 0);
  EXPECT_NE(run.servers_log.find("parameter server rank 2"), std::string::npos) << run.servers_log;
}

TEST(ParameterServerTrain, SspWithNoSlackTrainsLikeSyncAndOneProcess) {
  TempDir dir;
  const std::string args = exact_args() + " --set data.global_batch=32";
  const std::string adamw = " --set optimizer.name=adamw --set optimizer.lr=0.002";
  const std::string ssp = ps_args(2) + " --set parallel.ps.mode=ssp";
  const auto one =
      run_loom("train " + exact_args() + " --set data.batch_size=32 --out " + (dir / "one"));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const auto sync = run_loom(launch(2, 2, args + ps_args(2) + " --out " + (dir / "sync")));
  ASSERT_EQ(sync.exit_code, 0) << sync.output;
  const auto deltas = run_loom(launch(2, 2, args + ssp + " --out " + (dir / "deltas")));
  ASSERT_EQ(deltas.exit_code, 0) << deltas.output;
  const auto sync_adamw =
      run_loom(launch(2, 2, args + adamw + ps_args(2) + " --out " + (dir / "sync-adamw")));
  ASSERT_EQ(sync_adamw.exit_code, 0) << sync_adamw.output;
  const auto on_servers = run_loom(launch(
      2, 2,
      args + adamw + ssp + " --set parallel.ps.optimizer_on=server --out " + (dir / "on-servers")));
  ASSERT_EQ(on_servers.exit_code, 0) << on_servers.output;

  expect_same_model(dir / "deltas", dir / "sync", 1e-5);
  expect_same_model(dir / "deltas", dir / "one", 1e-5);
  expect_same_model(dir / "on-servers", dir / "sync-adamw", 1e-5);
  // The run recorded SSP with no slack and the optimizer on the servers, and ran it: the servers
  // held the parameters (only then do step records carry a staleness), never a step behind.
  const auto recorded =
      json_line(run_loom("config --json " + (dir / "on-servers/config.yaml")).output);
  EXPECT_EQ(recorded["parallel"]["ps"]["mode"], "ssp");
  EXPECT_EQ(recorded["parallel"]["ps"]["staleness"], 0);
  EXPECT_EQ(recorded["parallel"]["ps"]["optimizer_on"], "server");
  const auto steps = metrics_records(dir / "on-servers", "step");
  ASSERT_FALSE(steps.empty());
  for (const auto& step : steps) EXPECT_EQ(step.value("staleness", -1), 0) << step;
  const auto sync_steps = metrics_records(dir / "sync", "step");
  ASSERT_FALSE(sync_steps.empty());
  EXPECT_FALSE(sync_steps[0].contains("staleness"))
      << "sync servers with the optimizer on the workers hold no parameters";
  const auto summary = summary_of(dir / "on-servers");
  EXPECT_EQ(summary["parameter_servers"]["max_staleness"], 0) << summary.dump(2);
  // The optimizer state came back from the servers under the model's names.
  const auto state = optimizer_state_of(dir / "on-servers");
  const auto reference = optimizer_state_of(dir / "sync-adamw");
  EXPECT_EQ(state.size(), reference.size());
  for (const auto& [name, t] : reference) {
    ASSERT_TRUE(state.count(name)) << name;
    EXPECT_TRUE(t.to(at::kDouble).allclose(state.at(name).to(at::kDouble), 1e-4, 1e-9)) << name;
  }
}

// A straggler (worker rank 1 sleeps 50 ms a step, longer in slower builds): under SSP(2) the fast
// worker reaches the bound and never passes it; async lets it run further ahead.
TEST(ParameterServerTrain, SspKeepsEveryWorkerWithinTheBoundOfTheSlowest) {
  TempDir dir;
  const std::string straggler =
      "LOOM_FAULT_SLOW_RANK=1:" + std::to_string(static_cast<int>(50 * kSlowdown));
  const std::string args = exact_args() + " --set data.global_batch=32" + ps_args(1);
  const auto ssp = run_loom(launch(2, 1,
                                   args +
                                       " --trace --set parallel.ps.mode=ssp"
                                       " --set parallel.ps.staleness=2 --out " +
                                       (dir / "ssp")),
                            straggler);
  ASSERT_EQ(ssp.exit_code, 0) << ssp.output;
  const auto async = run_loom(
      launch(2, 1, args + " --set parallel.ps.mode=async --out " + (dir / "async")), straggler);
  ASSERT_EQ(async.exit_code, 0) << async.output;

  EXPECT_EQ(summary_of(dir / "ssp")["parameter_servers"]["max_staleness"], 2);
  expect_server_spans(dir / "ssp/trace.json", {2}, "apply a step", 10);
  EXPECT_GT(summary_of(dir / "async")["parameter_servers"]["max_staleness"].get<int>(), 2);
  // Every logged step of worker 0 records its learning rate and staleness.
  int steps = 0;
  std::istringstream lines(read_text(dir / "ssp/metrics.jsonl"));
  for (std::string line; std::getline(lines, line);) {
    const auto record = nlohmann::json::parse(line);
    if (record["type"] != "step") continue;
    ++steps;
    EXPECT_GT(record["lr"].get<double>(), 0) << line;
    EXPECT_LE(record["staleness"].get<int>(), 2) << line;
  }
  EXPECT_GE(steps, 3);
}

// Asynchronous servers train Fashion-MNIST with 2 workers, with the optimizer and its state on
// the server: one epoch reaches 88.4-88.5% here (the demo's three epochs passed 89%, at three
// times the suite's time); the bar leaves room for the staleness that timing decides.
TEST(ParameterServerTrain, AsyncServersTrainFashionMnist) {
  if (!std::filesystem::exists(setting("LOOM_FASHION_MNIST_DIR"))) {
    GTEST_SKIP() << "Fashion-MNIST (dataset-fashion-mnist) is not installed";
  }
  TempDir dir;
  // fp32 pinned: auto picks bf16 only on CPUs with native bf16; the bar must not follow the host.
  const auto run = run_loom(
      launch(2, 1,
             "--set data.global_batch=64 --set train.log_every=200 --set train.epochs=1"
             " --set runtime.precision=fp32" +
                 ps_args(1) +
                 " --set parallel.ps.mode=async --set parallel.ps.optimizer_on=server --out " +
                 dir.path()));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const auto summary = summary_of(dir.path());
  EXPECT_GE(summary["test_accuracy"].get<double>(), 0.86) << run.output;
  EXPECT_EQ(summary["parameter_servers"]["per_server"][0]["steps"], 2 * summary["steps"].get<int>())
      << "every push applied on arrival";
}

// Checkpoints written while the servers held the parameters and the optimizer state resume
// under all-reduce and back: the same model as a run never stopped.
TEST(ParameterServerTrain, ACheckpointMovesBetweenServerOptimizerAndAllReduce) {
  TempDir dir;
  const std::string args = exact_args() +
                           " --set data.global_batch=32 --set checkpoint.every_steps=4"
                           " --set optimizer.name=adamw --set optimizer.lr=0.002 --out ";
  const std::string held = ps_args(2) + " --set parallel.ps.optimizer_on=server";
  const auto straight = run_loom(launch(2, 2, args + (dir / "straight") + held));
  ASSERT_EQ(straight.exit_code, 0) << straight.output;
  const auto first =
      run_loom(launch(2, 2, args + (dir / "moved") + held), "LOOM_FAULT_STOP_AFTER_STEP=8");
  EXPECT_NE(first.exit_code, 0) << first.output;
  const auto second =
      run_loom(launch(2, 0, args + (dir / "moved") + " " + kDefaultsOnly + " --resume"),
               "LOOM_FAULT_STOP_AFTER_STEP=12");
  EXPECT_NE(second.exit_code, 0) << second.output;
  const auto third =
      run_loom(launch(2, 1,
                      args + (dir / "moved") + ps_args(1) +
                          " --set parallel.ps.optimizer_on=server " + kDefaultsOnly + " --resume"));
  ASSERT_EQ(third.exit_code, 0) << third.output;
  EXPECT_EQ(summary_of(dir / "moved")["resumed_from_step"], 12);
  expect_same_model(dir / "moved", dir / "straight", 1e-5);
}

// Server 0 of asynchronous servers on another node dies: the workers name it within the
// timeout + 10 s.
TEST(ParameterServerTrain, AKilledAsyncServerIsNamedByTheWorkers) {
  TempDir dir;
  const KilledServerRun run =
      run_until_a_server_dies(dir, " --set parallel.ps.mode=async", 1, 10, 5);
  EXPECT_NE(run.workers.exit_code, 0) << run.workers.output;
  EXPECT_NE(run.workers.output.find("the answer of server 0 (rank 2 on host "), std::string::npos)
      << run.workers.output;
  EXPECT_LT(run.seconds, 10 + 10 + 15) << run.workers.output;
  EXPECT_NE(run.servers_exit, 0);
}

TEST(ParameterServerTrain, ServersThatLeaveNoWorkerAreAConfigError) {
  TempDir dir;
  const auto result =
      run_loom(launch(1, 1, tiny_synthetic_args() + ps_args(2) + " --out " + dir.path()));
  EXPECT_EQ(result.exit_code, 2) << result.output;
  EXPECT_NE(result.output.find("parallel.ps.servers"), std::string::npos) << result.output;
  const auto alone = run_loom("train " + tiny_synthetic_args() + ps_args(1));
  EXPECT_EQ(alone.exit_code, 2) << alone.output;
  EXPECT_NE(alone.output.find("--servers K"), std::string::npos) << alone.output;
  // Server modes without servers, a bound without SSP, compression of parameters.
  for (const auto& [set, key] : std::vector<std::pair<std::string, std::string>>{
           {"parallel.ps.mode=async", "parallel.ps.mode"},
           {"parallel.ps.optimizer_on=server", "parallel.ps.optimizer_on"},
           {"parallel.mode=ps --set parallel.ps.staleness=2", "parallel.ps.staleness"},
           {"parallel.mode=ps --set parallel.ps.mode=ssp --set parallel.compression=bf16",
            "parallel.compression"}}) {
    const auto bad = run_loom("train " + tiny_synthetic_args() + " --set " + set);
    EXPECT_EQ(bad.exit_code, 2) << set << "\n" << bad.output;
    EXPECT_NE(bad.output.find("'" + key + "'"), std::string::npos) << bad.output;
  }
}

}  // namespace
}  // namespace loom::test
