// Trains a TorchScript module exported by the project environment's torch, in process and with
// the CLI.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "loom/core/error.h"
#include "loom/models/torchscript_model.h"
#include "tools/test_support.h"

namespace loom::models {
namespace {

// A small conv net scripted from Python; its forward returns logits for 4 classes.
std::string export_module(const test::TempDir& dir) {
  const std::string python = test::torch_python();
  if (python.empty()) return "";
  const std::string path = dir / "net.pt";
  const std::string script = dir / "export.py";
  test::write_text(script,
                   "import sys, torch\n"
                   "class Net(torch.nn.Module):\n"
                   "    def __init__(self):\n"
                   "        super().__init__()\n"
                   "        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)\n"
                   "        self.bn = torch.nn.BatchNorm2d(8)\n"
                   "        self.fc = torch.nn.Linear(8, 4)\n"
                   "    def forward(self, x):\n"
                   "        x = torch.relu(self.bn(self.conv(x)))\n"
                   "        return self.fc(x.mean((2, 3)))\n"
                   "torch.manual_seed(0)\n"
                   "torch.jit.script(Net()).save(sys.argv[1])\n");
  auto r = test::run_command(python + " " + script + " " + path);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return path;
}

TEST(TorchScript, LoadsParametersBuffersAndForward) {
  test::TempDir dir;
  const std::string path = export_module(dir);
  if (path.empty())
    GTEST_SKIP() << "no Python with torch (LOOM_PYTHON; scripts/install-deps.sh makes .venv)";
  auto model = load_torchscript(path);
  EXPECT_EQ(model->name(), "torchscript");
  EXPECT_TRUE(model->is_convolutional());
  EXPECT_EQ(model->parameter_count(), 3 * 8 * 9 + 8 + 8 + 8 + 8 * 4 + 4);
  std::vector<std::string> buffers;
  for (const auto& [n, b] : model->named_buffers()) buffers.push_back(n);
  EXPECT_NE(std::find(buffers.begin(), buffers.end(), "bn.running_mean"), buffers.end());
  at::Tensor y = model->forward(at::randn({5, 3, 16, 16}));
  EXPECT_EQ(y.sizes(), (at::IntArrayRef{5, 4}));
}

TEST(TorchScript, MissingOrInvalidFileIsAConfigError) {
  test::TempDir dir;
  EXPECT_THROW(load_torchscript(dir / "absent.pt"), ConfigError);
  test::write_text(dir / "junk.pt", "not a zip archive");
  EXPECT_THROW(load_torchscript(dir / "junk.pt"), ConfigError);
}

TEST(TorchScript, TrainsThroughTheCli) {
  test::TempDir dir;
  const std::string path = export_module(dir);
  if (path.empty())
    GTEST_SKIP() << "no Python with torch (LOOM_PYTHON; scripts/install-deps.sh makes .venv)";
  auto r = test::run_loom("train --out " + (dir / "run") + " " + test::tiny_synthetic_args() +
                          " --set model.torchscript=" + path +
                          " --set train.epochs=8 --set optimizer.lr=0.1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto summary = nlohmann::json::parse(test::read_text(dir / "run/summary.json"));
  EXPECT_EQ(summary["model"], "torchscript");
  // Four classes of smooth prototypes plus noise: chance is 25%; 8 epochs reach 100% for seeds
  // 0-3 in both bf16 and fp32, so 0.9 leaves room for other CPUs and kernels.
  EXPECT_GT(summary["test_accuracy"].get<double>(), 0.9) << r.output;
}

// The same module on two data-parallel ranks: DataParallel hooks a TorchScript module's
// parameters like any other.
TEST(TorchScript, TrainsDataParallelOnTwoRanks) {
  test::TempDir dir;
  const std::string path = export_module(dir);
  if (path.empty())
    GTEST_SKIP() << "no Python with torch (LOOM_PYTHON; scripts/install-deps.sh makes .venv)";
  auto r = test::run_loom(
      "launch --nproc-per-node 2 -- " + test::loom_binary() + " train --out " + (dir / "run") +
      " " + test::tiny_synthetic_args() + " --set model.torchscript=" + path +
      " --set data.global_batch=16 --set train.epochs=8 --set optimizer.lr=0.1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto summary = nlohmann::json::parse(test::read_text(dir / "run/summary.json"));
  EXPECT_EQ(summary["model"], "torchscript");
  EXPECT_EQ(summary["data_parallel"]["ranks"], 2);
  EXPECT_GT(summary["data_parallel"]["buckets"].get<int>(), 0);
  EXPECT_GT(summary["test_accuracy"].get<double>(), 0.9) << r.output;
}

}  // namespace
}  // namespace loom::models
