// The engines users already run, each against the real thing: `srun -n 2` on a one-node Slurm
// (munged, slurmctld and slurmd from Debian, started for the test by scripts/one-node-slurm.sh),
// `mpirun -np 2` (Open MPI), torchrun (from the torch Loom builds against), and Kubeflow's
// variables, which `loom launch` reads as torchrun does (two launchers, one per "node", given
// nothing else). Under each, `loom train` and a user's own
// Python script (loom.distributed, loom.parallel) on two ranks must end with the checkpoint that
// `loom launch --nproc-per-node 2` ends with, byte for byte. A test whose engine is missing, or
// cannot start here, skips saying why.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "e2e/json_output.h"
#include "loom/core/topology.h"
#include "tools/run_compare.h"
#include "tools/test_support.h"

namespace loom::test {
namespace {

// What the two ranks run.
enum class Program { kTrain, kPython };

// Why `program` cannot run here, or "".
std::string missing_for(Program program) {
  if (program == Program::kTrain) return "";
  if (torch_python().empty()) {
    return std::string("no Python with torch: ") + test::test_python() +
           " (scripts/install-deps.sh makes .venv)";
  }
  if (!std::filesystem::exists(test::python_package_dir() + "/loom/__init__.py")) {
    return "the loom Python package is not built (python3-dev, pybind11 in LOOM_PYTHON's "
           "environment)";
  }
  return "";
}

// The Python tests' script and its arguments: its own model, loss and loop,
// loom.parallel.DataParallel, and a Loom checkpoint after each of its 5 steps into `out`.
std::string python_script(const std::string& out) {
  return test::source_dir() + "/tests/python/scripts/two_heads.py " + out +
         "/final.pt --checkpoint " + out + "/checkpoints";
}

// The command every rank runs, writing into `out`; deterministic (fp32, no dropout, a global
// batch split over the ranks, one compute thread a rank), so that runs under two launchers
// agree bit for bit. The script's torch would otherwise take each launcher's default threads
// (here: loom launch the usable cores, mpirun and torchrun one), and torch 2.11 rounds the
// script's products on two threads otherwise than on one.
std::string command_of(Program program, const std::string& out) {
  if (program == Program::kTrain) {
    return test::loom_binary() + " train " + tiny_synthetic_args() +
           " --set model=mlp --set model.dropout=0 --set runtime.precision=fp32"
           " --set train.epochs=2 --set data.global_batch=32 --out " +
           out;
  }
  return "env PYTHONPATH=" + test::python_package_dir() + " OMP_NUM_THREADS=1 " + torch_python() +
         " " + python_script(out);
}

// The run the engine made in `dir`/engine against the same program under `loom launch
// --nproc-per-node 2`: the same final checkpoint, model and training state byte for byte,
// written by a job of two ranks.
void expect_like_loom_launch(Program program, const TempDir& dir) {
  const auto reference =
      run_loom("launch --nproc-per-node 2 -- " + command_of(program, dir / "launch"));
  ASSERT_EQ(reference.exit_code, 0) << reference.output;
  expect_identical_runs(dir / "engine", dir / "launch");
  const auto manifest =
      nlohmann::json::parse(read_text(latest_checkpoint(dir / "engine") + "/manifest.json"));
  EXPECT_EQ(manifest["layout"]["ranks"], 2) << manifest.dump(2);
}

// Every rank reads the job's secret (docs/security.md) from its environment.
const char* kToken = "LOOM_STORE_TOKEN=engines-test-token";

// A one-node Slurm of the test's own, in `dir` (scripts/one-node-slurm.sh), on free ports;
// stopped when it goes away.
class OneNodeSlurm {
 public:
  explicit OneNodeSlurm(const std::string& dir) : dir_(dir) {
    const auto started =
        run_command(script() + " start " + dir + " " + std::to_string(free_port()) + " " +
                    std::to_string(free_port()));
    if (started.exit_code == 0) {
      conf_ = dir + "/slurm.conf";
    } else {
      why_not_ = "a one-node Slurm cannot start here: " + started.output;
    }
  }
  ~OneNodeSlurm() { run_command(script() + " stop " + dir_); }
  OneNodeSlurm(const OneNodeSlurm&) = delete;
  OneNodeSlurm& operator=(const OneNodeSlurm&) = delete;

  // "" when it runs.
  const std::string& why_not() const { return why_not_; }
  // `srun ARGS` against it, free of any variable of a Slurm job the test itself runs in.
  std::string srun(const std::string& args) const {
    return "env $(env | sed -n 's/^\\(SLURM_[A-Za-z0-9_]*\\)=.*/-u \\1/p') SLURM_CONF=" + conf_ +
           " srun " + args;
  }

 private:
  static std::string script() { return test::source_dir() + "/scripts/one-node-slurm.sh"; }

  std::string dir_, conf_, why_not_;
};

// `srun -n 2 PROGRAM`: the ranks learn their place from SLURM_PROCID, SLURM_NTASKS and
// SLURM_LOCALID, and rank 0 serves the store on the job's first node (SLURM_JOB_NODELIST).
void run_under_srun(Program program) {
  if (const std::string missing = missing_for(program); !missing.empty()) GTEST_SKIP() << missing;
  TempDir dir;
  OneNodeSlurm slurm(dir / "slurm");
  if (!slurm.why_not().empty()) GTEST_SKIP() << slurm.why_not();
  const auto engine =
      run_command(std::string("env ") + kToken + " MASTER_PORT=" + std::to_string(free_port()) +
                  " " + slurm.srun("-n 2 " + command_of(program, dir / "engine")));
  ASSERT_EQ(engine.exit_code, 0) << engine.output;
  expect_like_loom_launch(program, dir);
}

TEST(Engines, SrunTrainsLikeLoomLaunch) { run_under_srun(Program::kTrain); }
TEST(Engines, SrunRunsAPythonScriptLikeLoomLaunch) { run_under_srun(Program::kPython); }

// `mpirun -np 2 PROGRAM`: the ranks read OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK and
// _LOCAL_SIZE, and MASTER_ADDR/MASTER_PORT for the store. --bind-to none: the ranks get the
// cores `loom launch` would give them (Open MPI binds each to one core by default).
void run_under_mpirun(Program program) {
  if (const std::string missing = missing_for(program); !missing.empty()) GTEST_SKIP() << missing;
  const auto version = run_command("mpirun --version");
  if (version.exit_code != 0) GTEST_SKIP() << "no mpirun (Debian: openmpi-bin)";
  if (version.output.find("Open MPI") == std::string::npos) {
    GTEST_SKIP() << "mpirun is not Open MPI's: " << version.output;
  }
  TempDir dir;
  const auto engine =
      run_command(std::string("env ") + kToken +
                  " MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(free_port()) +
                  " mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 " +
                  command_of(program, dir / "engine"));
  ASSERT_EQ(engine.exit_code, 0) << engine.output;
  expect_like_loom_launch(program, dir);
}

TEST(Engines, MpirunTrainsLikeLoomLaunch) { run_under_mpirun(Program::kTrain); }
TEST(Engines, MpirunRunsAPythonScriptLikeLoomLaunch) { run_under_mpirun(Program::kPython); }

// torchrun beside the tests' Python (the environment scripts/install-deps.sh makes), or "".
std::string torchrun() {
  const std::string python = torch_python();
  if (python.empty()) return "";
  const auto path = std::filesystem::path(python).parent_path() / "torchrun";
  return std::filesystem::exists(path) ? path.string() : "";
}

// `torchrun --standalone --nproc-per-node 2 PROGRAM`: the ranks read RANK, WORLD_SIZE,
// LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT, as under `loom launch`. By default
// torchrun's agent serves its own TCPStore at MASTER_PORT for the ranks to share
// (TORCHELASTIC_USE_AGENT_STORE=True), and Loom's ranks use it; with
// TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 torchrun hands the ranks a free port instead, and rank 0
// serves Loom's store there (docs/data_parallel.md). `loom train` runs with --no-python on the
// agent's store; the script, as torchrun runs a Python script, with torchrun's Python (and one
// compute thread a rank, as command_of gives it: torchrun's default too) on Loom's store.
std::string under_torchrun(Program program, const std::string& out, const std::string& flags) {
  const std::string options = torchrun() + " --standalone --nproc-per-node 2 " + flags + " ";
  return std::string("env ") + kToken + " " +
         (program == Program::kTrain
              ? options + "--no-python " + command_of(program, out)
              : "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 PYTHONPATH=" + test::python_package_dir() +
                    " OMP_NUM_THREADS=1 " + options + python_script(out));
}

void run_under_torchrun(Program program) {
  if (const std::string missing = missing_for(program); !missing.empty()) GTEST_SKIP() << missing;
  if (torchrun().empty()) GTEST_SKIP() << "no torchrun beside " << test::test_python();
  TempDir dir;
  const auto engine = run_command(under_torchrun(program, dir / "engine", ""));
  ASSERT_EQ(engine.exit_code, 0) << engine.output;
  expect_like_loom_launch(program, dir);
}

TEST(Engines, TorchrunTrainsLikeLoomLaunch) { run_under_torchrun(Program::kTrain); }
TEST(Engines, TorchrunRunsAPythonScriptLikeLoomLaunch) { run_under_torchrun(Program::kPython); }

// torchrun --max-restarts starts every rank again when one dies, telling them the attempt
// (TORCHELASTIC_RESTART_COUNT): `loom train` resumes from its last checkpoint, in a key space
// of the agent's store apart from the failed attempt's, and ends as the job that never failed.
TEST(Engines, TorchrunRestartsResumeAndEndLikeLoomLaunch) {
  if (torchrun().empty()) GTEST_SKIP() << "no torchrun beside " << test::test_python();
  TempDir dir;
  // Rank 1 dies after step 6 on the first attempt only; a checkpoint is written every 4 steps.
  const auto engine =
      run_command("env LOOM_FAULT_KILL_RANK_AFTER_STEP=1:6 " +
                  under_torchrun(Program::kTrain, dir / "engine", "--max-restarts 1") +
                  " --set checkpoint.every_steps=4");
  ASSERT_EQ(engine.exit_code, 0) << engine.output;
  EXPECT_EQ(summary_of(dir / "engine")["resumed_from_step"], 4);
  expect_like_loom_launch(Program::kTrain, dir);
}

// A rank's error reaches torchrun's failure summary through the file torchrun names
// (TORCHELASTIC_ERROR_FILE), as a Python worker's does under @record.
TEST(Engines, TorchrunsFailureSummaryHasTheRanksError) {
  if (torchrun().empty()) GTEST_SKIP() << "no torchrun beside " << test::test_python();
  TempDir dir;
  const auto engine = run_command(std::string("env ") + kToken + " " + torchrun() +
                                  " --standalone --nproc-per-node 1 --no-python " +
                                  test::loom_binary() + " train " + tiny_synthetic_args() +
                                  " --set optimizer.name=nonesuch --out " + (dir / "run"));
  EXPECT_NE(engine.exit_code, 0) << engine.output;
  EXPECT_EQ(engine.output.find("error_file: <N/A>"), std::string::npos) << engine.output;
  EXPECT_NE(engine.output.find("error_file: /"), std::string::npos) << engine.output;
}

// What Kubeflow's PyTorchJob puts in the environment of node `node` of two, each running
// `loom launch -- PROGRAM` with one rank: torchrun's PET_NNODES, PET_NPROC_PER_NODE,
// PET_NODE_RANK, PET_MASTER_ADDR and PET_MASTER_PORT (all a TrainJob on a JobSet sets), and
// the node-level MASTER_ADDR, MASTER_PORT, WORLD_SIZE and RANK that the launcher must replace
// with its ranks' own.
std::string kubeflow_node(int node, int port) {
  const std::string rank = std::to_string(node), master = std::to_string(port);
  return std::string("env ") + kToken + " PET_NNODES=2 PET_NPROC_PER_NODE=1 PET_NODE_RANK=" + rank +
         " PET_MASTER_ADDR=127.0.0.1 PET_MASTER_PORT=" + master +
         " MASTER_ADDR=127.0.0.1 MASTER_PORT=" + master + " WORLD_SIZE=2 RANK=" + rank + " " +
         test::loom_binary() + " launch -- ";
}

void run_under_kubeflow_variables(Program program) {
  if (const std::string missing = missing_for(program); !missing.empty()) GTEST_SKIP() << missing;
  TempDir dir;
  const int port = free_port();
  const std::string command = command_of(program, dir / "engine");
  BackgroundProcess second(kubeflow_node(1, port) + command, dir / "node1.log");
  const auto first = run_command(kubeflow_node(0, port) + command);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  ASSERT_EQ(second.wait(), 0) << read_text(dir / "node1.log");
  expect_like_loom_launch(program, dir);
}

TEST(Engines, KubeflowVariablesTrainLikeLoomLaunch) {
  run_under_kubeflow_variables(Program::kTrain);
}
TEST(Engines, KubeflowVariablesRunAPythonScriptLikeLoomLaunch) {
  run_under_kubeflow_variables(Program::kPython);
}

// A value on the command line wins over PET_*, as with torchrun, and a bad PET_* value is a
// configuration error naming the variable.
TEST(Engines, KubeflowVariablesYieldToTheCommandLineAndAreChecked) {
  auto r = run_loom(
      "launch --nnodes 1 --nproc-per-node 2 --node-rank 0 -- sh -c 'echo \"rank=$RANK "
      "world=$WORLD_SIZE\"'",
      "PET_NNODES=3 PET_NPROC_PER_NODE=5 PET_NODE_RANK=2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("rank=1 world=2"), std::string::npos) << r.output;
  r = run_loom("launch -- true", "PET_NPROC_PER_NODE=many");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("PET_NPROC_PER_NODE"), std::string::npos) << r.output;
  const auto beyond = test::run_loom_reporting(
      "launch -- true", "PET_NNODES=2 PET_NODE_RANK=2 PET_MASTER_ADDR=127.0.0.1");
  EXPECT_EQ(beyond.result.exit_code, 2) << beyond.result.output;
  ASSERT_FALSE(beyond.error.is_null()) << beyond.result.output;
  EXPECT_EQ(beyond.error["fields"]["key"], "PET_NODE_RANK") << beyond.error.dump();
  EXPECT_EQ(beyond.error["fields"]["value"], "2") << beyond.error.dump();
  EXPECT_EQ(beyond.error["fields"]["nodes"], "2") << beyond.error.dump();
  r = run_loom("launch -- true", "PET_NNODES=2");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("PET_MASTER_ADDR"), std::string::npos) << r.output;
  // "cpu": one rank per core this process may use (its affinity, its cgroup's quota).
  r = run_loom("launch -- sh -c 'echo \"world=$WORLD_SIZE\"'", "PET_NPROC_PER_NODE=cpu");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string world = "world=" + std::to_string(detect_topology().usable_cores);
  EXPECT_EQ(count_of(r.output, world + "\n"), detect_topology().usable_cores) << r.output;
}

}  // namespace
}  // namespace loom::test
