// Models as chains of blocks: every zoo model's forward is its blocks run in order, each
// parameter belongs to one block under the model's own name, and TorchScript modules split at
// their top-level children or are refused with the reason.
#include <gtest/gtest.h>

#include "loom/core/error.h"
#include "loom/models/model.h"
#include "loom/models/torchscript_model.h"
#include "tools/test_support.h"

namespace loom::models {
namespace {

std::vector<std::string> block_names(Model& model) {
  std::vector<std::string> names;
  for (const Block& b : model.blocks()) names.push_back(b.name);
  return names;
}

TEST(ModelBlocks, EveryZooModelIsTheChainOfItsBlocks) {
  struct Case {
    std::string name;
    InputSpec input;
    size_t blocks;
  };
  for (const auto& c : std::vector<Case>{{"mlp", {1, 28, 28, 10}, 3},
                                         {"cnn", {1, 28, 28, 10}, 3},
                                         {"resnet18", {3, 32, 32, 10}, 10},
                                         {"resnet50", {3, 32, 32, 7}, 18},
                                         {"vit_tiny", {3, 32, 32, 5}, 14}}) {
    ModelConfig config;
    config.name = c.name;
    config.patch_size = 8;
    auto model = make_model(config, c.input);
    EXPECT_EQ(model->blocks().size(), c.blocks) << c.name;
    // Owned once each, and the chain gives the forward pass.
    EXPECT_NO_THROW(
        check_blocks(*model, at::randn({3, c.input.channels, c.input.height, c.input.width})))
        << c.name;
    // The blocks' parameters, in block order, are the model's in its own order.
    std::vector<std::string> from_blocks, from_model;
    for (const Block& b : model->blocks()) {
      for (const auto& [name, p] : b.parameters) from_blocks.push_back(name);
    }
    for (const auto& [name, p] : model->named_parameters()) from_model.push_back(name);
    EXPECT_EQ(from_blocks, from_model) << c.name;
  }
}

TEST(ModelBlocks, NamesFollowTheArchitecture) {
  ModelConfig config;
  config.name = "resnet18";
  auto resnet = make_model(config, {3, 32, 32, 10});
  const auto names = block_names(*resnet);
  EXPECT_EQ(names.front(), "stem");
  EXPECT_EQ(names[1], "layer1.0");
  EXPECT_EQ(names[8], "layer4.1");
  EXPECT_EQ(names.back(), "head");
  const auto blocks = resnet->blocks();
  ASSERT_EQ(blocks[3].parameters.front().first, "layer2.0.conv1.weight");
  EXPECT_EQ(blocks.back().parameters.front().first, "fc.weight");
  EXPECT_EQ(blocks.front().buffers.front().first, "bn1.running_mean");
  config.name = "cnn";
  config.depth = 2;  // two convolutions per stage, each stage ending in a max-pool
  auto cnn = make_model(config, {1, 28, 28, 10});
  EXPECT_EQ(block_names(*cnn), (std::vector<std::string>{"features.0", "features.3", "features.7",
                                                         "features.10", "classifier"}));
}

// The blocks share the model's tensors: a gradient through the chain lands on the model.
TEST(ModelBlocks, BlocksShareTheModelsParameters) {
  ModelConfig config;
  config.name = "mlp";
  config.dropout = 0;
  auto model = make_model(config, {1, 8, 8, 4});
  at::Tensor x = at::randn({2, 1, 8, 8});
  for (const Block& b : model->blocks()) x = b.forward(x);
  x.sum().backward();
  for (const auto& [name, p] : model->named_parameters()) {
    EXPECT_TRUE(p.grad().defined()) << name;
  }
}

std::string export_script(const test::TempDir& dir, const std::string& body) {
  const std::string python = test::torch_python();
  if (python.empty()) return "";
  const std::string path = dir / "net.pt";
  const std::string script = dir / "export.py";
  test::write_text(script, "import sys, torch\nfrom torch import nn\ntorch.manual_seed(0)\n" +
                               body + "torch.jit.script(net).save(sys.argv[1])\n");
  auto r = test::run_command(python + " " + script + " " + path);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return path;
}

TEST(ModelBlocks, TorchScriptSplitsAtTopLevelChildren) {
  test::TempDir dir;
  const std::string path =
      export_script(dir,
                    "net = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), "
                    "nn.ReLU(), nn.Flatten(), nn.Linear(4 * 8 * 8, 5))\n");
  if (path.empty())
    GTEST_SKIP() << "no Python with torch (LOOM_PYTHON; scripts/install-deps.sh makes .venv)";
  auto model = load_torchscript(path);
  EXPECT_EQ(block_names(*model), (std::vector<std::string>{"0", "1", "2", "3", "4"}));
  EXPECT_NO_THROW(check_blocks(*model, at::randn({2, 3, 8, 8})));
  const auto blocks = model->blocks();
  EXPECT_EQ(blocks[4].parameters.front().first, "4.weight");
  EXPECT_EQ(blocks[1].buffers.front().first, "1.running_mean");
}

TEST(ModelBlocks, TorchScriptThatIsNotAChainIsRefusedWithTheReason) {
  test::TempDir dir;
  // A residual connection around its children: running them in order is not its forward.
  const std::string path = export_script(dir,
                                         "class Net(nn.Module):\n"
                                         "    def __init__(self):\n"
                                         "        super().__init__()\n"
                                         "        self.a = nn.Linear(6, 6)\n"
                                         "        self.b = nn.Linear(6, 6)\n"
                                         "    def forward(self, x):\n"
                                         "        return self.b(self.a(x) + x)\n"
                                         "net = Net()\n");
  if (path.empty())
    GTEST_SKIP() << "no Python with torch (LOOM_PYTHON; scripts/install-deps.sh makes .venv)";
  auto model = load_torchscript(path);
  try {
    check_blocks(*model, at::randn({4, 6}));
    FAIL() << "a residual module was accepted as a chain";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.field("problem"), "not_a_chain") << e.what();
  }
  // A parameter of the root module belongs to no child.
  test::TempDir dir2;
  const std::string root_param = export_script(dir2,
                                               "class Net(nn.Module):\n"
                                               "    def __init__(self):\n"
                                               "        super().__init__()\n"
                                               "        self.a = nn.Linear(6, 6)\n"
                                               "        self.scale = nn.Parameter(torch.ones(6))\n"
                                               "    def forward(self, x):\n"
                                               "        return self.a(x) * self.scale\n"
                                               "net = Net()\n");
  auto model2 = load_torchscript(root_param);
  try {
    check_blocks(*model2, at::randn({4, 6}));
    FAIL() << "a root-level parameter was accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.field("problem"), "outside_blocks") << e.what();
    EXPECT_EQ(e.field("tensor"), "scale");
  }
}

}  // namespace
}  // namespace loom::models
