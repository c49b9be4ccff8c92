#include "loom/core/config.h"

#include <gtest/gtest.h>

#include "loom/core/error.h"
#include "tools/test_support.h"

namespace loom {
namespace {

std::string config_error(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  try {
    parse_config(yaml, "test.yaml", overrides);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "no error";
}

// Later files replace the keys they set (a list whole) and leave the others: a tuned snippet
// such as autotune.yaml goes on top of the user's configuration.
TEST(Config, LaterFilesReplaceTheKeysTheySet) {
  test::TempDir dir;
  test::write_text(dir / "base.yaml",
                   "model: resnet18\ndata: {workers: 1, batch_size: 32, transforms: "
                   "[center_crop: 20, random_horizontal_flip]}\ntrain: {epochs: 7}\n");
  test::write_text(dir / "tuned.yaml",
                   "data: {workers: 2, transforms: [center_crop: 16]}\nruntime: {threads: 1}\n");
  const Config c = load_config({dir / "base.yaml", dir / "tuned.yaml"}, {"train.epochs=9"});
  EXPECT_EQ(c.model.name, "resnet18");
  EXPECT_EQ(c.data.batch_size, 32);
  EXPECT_EQ(c.data.workers, 2);
  EXPECT_EQ(c.runtime.threads, 1);
  EXPECT_EQ(c.train.epochs, 9);  // --set comes last
  ASSERT_EQ(c.data.transforms.size(), 1u);
  EXPECT_EQ(c.data.transforms[0].name, "center_crop");
  try {
    load_config({dir / "base.yaml", dir / "absent.yaml"}, {});
    FAIL() << "a missing second file was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("absent.yaml"), std::string::npos) << e.what();
  }
}

TEST(Config, DefaultsAreTheFashionMnistCnn) {
  Config c = parse_config("", "defaults", {});
  EXPECT_EQ(c.model.name, "cnn");
  EXPECT_EQ(c.data.source, "fashion_mnist");
  EXPECT_EQ(c.runtime.precision, "auto");
  EXPECT_EQ(c.runtime.threads, 0);
  EXPECT_FALSE(c.data.path.empty());
}

TEST(Config, ReadsNestedKeysAndShorthands) {
  Config c = parse_config(
      "model: resnet18\ndata: synthetic\ntrain:\n  epochs: 7\n  grad_clip: 1.5\n"
      "runtime: {threads: 3, precision: fp32}\n",
      "t", {});
  EXPECT_EQ(c.model.name, "resnet18");
  EXPECT_EQ(c.data.source, "synthetic");
  EXPECT_EQ(c.train.epochs, 7);
  EXPECT_DOUBLE_EQ(c.train.grad_clip, 1.5);
  EXPECT_EQ(c.runtime.threads, 3);
  EXPECT_EQ(c.runtime.precision, "fp32");
}

TEST(Config, OverridesWinOverTheFile) {
  Config c =
      parse_config("train: {epochs: 7}\n", "t",
                   {"train.epochs=2", "model=mlp", "optimizer.lr=1e-3", "runtime.threads=auto"});
  EXPECT_EQ(c.train.epochs, 2);
  EXPECT_EQ(c.model.name, "mlp");
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 1e-3);
  EXPECT_EQ(c.runtime.threads, 0);
}

TEST(Config, UnknownKeyNamesTheKeyAndTheClosestValidOne) {
  EXPECT_EQ(config_error("train:\n  epoch: 3\n"),
            "unknown config key 'train.epoch' (in test.yaml); did you mean 'train.epochs'?");
  EXPECT_EQ(
      config_error("", {"optimizer.momentun=0.8"}),
      "unknown config key 'optimizer.momentun' (from --set); did you mean 'optimizer.momentum'?");
  // A far-off key gets no misleading suggestion.
  EXPECT_EQ(config_error("colour: blue\n"), "unknown config key 'colour' (in test.yaml)");
}

// YAML allows lists and mappings as keys; found by the config fuzz target, where they escaped as
// yaml-cpp's own exception instead of a configuration error.
TEST(Config, KeysThatAreNotNamesAreConfigErrors) {
  EXPECT_EQ(config_error("[1]: x\n"), "config in test.yaml: a key must be a name, got a list");
  EXPECT_EQ(config_error("train:\n  {a: 1}: 2\n"),
            "config section 'train' (in test.yaml): a key must be a name, got a mapping");
  EXPECT_EQ(config_error("data:\n  transforms:\n    - {{size: 224}: 1}\n"),
            "config key 'data.transforms[0]': a key must be a name, got a mapping (in test.yaml)");
}

TEST(Config, WrongTypeNamesKeyExpectedTypeAndValue) {
  EXPECT_EQ(config_error("train: {epochs: three}\n"),
            "config key 'train.epochs' (in test.yaml): expected an integer, got 'three'");
  EXPECT_EQ(config_error("", {"optimizer.lr=fast"}),
            "config key 'optimizer.lr' (from --set): expected a number, got 'fast'");
  EXPECT_EQ(config_error("train: {eval: maybe}\n"),
            "config key 'train.eval' (in test.yaml): expected true or false, got 'maybe'");
  EXPECT_EQ(config_error("runtime: {precision: bf61}\n"),
            "config key 'runtime.precision' (in test.yaml): expected one of auto, fp32, bf16 or "
            "fp16, got 'bf61' (did you mean 'bf16'?)");
  EXPECT_EQ(config_error("train: {epochs: [1, 2]}\n"),
            "config key 'train.epochs' (in test.yaml): expected an integer, got a list");
}

TEST(Config, RangesAreChecked) {
  EXPECT_EQ(config_error("", {"data.batch_size=0"}),
            "config key 'data.batch_size' (from --set): must be >= 1");
  EXPECT_EQ(
      config_error("", {"runtime.threads=0"}),
      "config key 'runtime.threads' (from --set): expected an integer >= 1 or 'auto', got '0'");
  EXPECT_EQ(config_error("", {"train.label_smoothing=1"}),
            "config key 'train.label_smoothing': must be < 1, got 1.0");
  EXPECT_EQ(config_error("", {"optimizer.lr=.inf"}),
            "config key 'optimizer.lr' (from --set): must be a finite number");
}

TEST(Config, SectionsAndTopLevelShapeAreChecked) {
  EXPECT_EQ(
      config_error("train: 3\n"),
      "config key 'train' (in test.yaml) is a section: give it a mapping of keys, not a value");
  EXPECT_EQ(config_error("- a\n- b\n"),
            "config test.yaml: expected a mapping of keys at the top level");
  try {
    parse_config("train: {epochs: 1\n", "test.yaml", {});
    ADD_FAILURE() << "broken YAML was parsed";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.field("problem"), "not_yaml");
    EXPECT_EQ(e.field("path"), "test.yaml");
  }
  EXPECT_EQ(config_error("", {"noequals"}), "--set expects key=value, got 'noequals'");
}

TEST(Config, TorchScriptShorthandSetsTheModelName) {
  Config c = parse_config("model: {torchscript: /tmp/m.pt}\n", "t", {});
  EXPECT_EQ(c.model.name, "torchscript");
  EXPECT_EQ(c.model.torchscript, "/tmp/m.pt");
  EXPECT_EQ(config_error("model: {name: cnn, torchscript: /tmp/m.pt}\n"),
            "config key 'model.name' is 'cnn' but model.torchscript is set; use one or the other");
  EXPECT_EQ(config_error("model: torchscript\n"),
            "config key 'model.torchscript': a path is required when model.name is torchscript");
}

TEST(Config, ResolvedYamlRoundTripsWithEveryKey) {
  Config c = parse_config(
      "", "t", {"optimizer.lr=0.0123", "train.epochs=9", "runtime.threads=4", "data.augment=true"});
  std::string yaml = config_to_yaml(c);
  for (const auto& row : describe_config()) {
    const std::string leaf = row.key.substr(row.key.find_last_of('.') + 1);
    EXPECT_NE(yaml.find(leaf + ":"), std::string::npos) << row.key << " missing from\n" << yaml;
  }
  Config again = parse_config(yaml, "resolved", {});
  EXPECT_EQ(config_to_yaml(again), yaml);
  EXPECT_DOUBLE_EQ(again.optimizer.lr, 0.0123);
  EXPECT_EQ(again.runtime.threads, 4);
  EXPECT_TRUE(again.data.augment);
  EXPECT_NE(config_to_json(again).find("\"lr\":0.0123"), std::string::npos);
}

// The reader takes the three entry forms apart as written; which transforms exist and their
// defaults are the data layer's (tests/unit/data/transform_registry_test.cpp).
TEST(Config, TransformListsReadAllThreeEntryFormsAndRoundTrip) {
  Config c = parse_config(
      "data:\n"
      "  transforms:\n"
      "    - random_resized_crop: 224\n"
      "    - random_horizontal_flip\n"
      "    - gaussian_blur: {kernel: 11, sigma: [0.5, 1.5]}\n",
      "t", {});
  ASSERT_EQ(c.data.transforms.size(), 3u);
  EXPECT_EQ(c.data.transforms[0].name, "random_resized_crop");
  EXPECT_EQ(c.data.transforms[0].value, std::vector<double>{224});
  EXPECT_TRUE(c.data.transforms[0].params.empty());
  EXPECT_EQ(c.data.transforms[1].name, "random_horizontal_flip");
  EXPECT_TRUE(c.data.transforms[1].params.empty() && c.data.transforms[1].value.empty());
  EXPECT_EQ(c.data.transforms[2].params.at("kernel"), std::vector<double>{11});
  EXPECT_EQ(c.data.transforms[2].params.at("sigma"), (std::vector<double>{0.5, 1.5}));
  EXPECT_EQ(c.data.transforms[2].origin, "in t");
  Config again = parse_config(config_to_yaml(c), "resolved", {});
  EXPECT_EQ(again.data.transforms, c.data.transforms);
  EXPECT_EQ(config_to_yaml(again), config_to_yaml(c));
  // --set takes the list in YAML flow style.
  Config set = parse_config("", "t", {"data.transforms=[center_crop: 20, {resize: [8, 9]}]"});
  ASSERT_EQ(set.data.transforms.size(), 2u);
  EXPECT_EQ(set.data.transforms[1].value, (std::vector<double>{8, 9}));
  EXPECT_EQ(set.data.transforms[1].origin, "from --set");
}

// fp16's loss scaling skips steps every rank steps together; parameter servers step as pushes
// arrive.
TEST(Config, Fp16WithParameterServersIsRefusedNamingThePrecision) {
  try {
    parse_config("", "t", {"runtime.precision=fp16", "parallel.mode=ps"});
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.field("key"), "runtime.precision");
  }
  EXPECT_EQ(parse_config("", "t", {"runtime.precision=fp16"}).runtime.precision, "fp16");
}

TEST(Config, MalformedTransformListsNameTheKey) {
  EXPECT_EQ(config_error("data: {transforms: center_crop}\n"),
            "config key 'data.transforms' (in test.yaml): expected a list of transforms, got "
            "'center_crop'");
  EXPECT_EQ(config_error("data: {transforms: [{resize: 1, center_crop: 2}]}\n"),
            "config key 'data.transforms[0]': expected a transform name or a one-key mapping "
            "name: parameters, got a mapping (in test.yaml)");
  EXPECT_EQ(config_error("data: {transforms: [resize: {size: big}]}\n"),
            "config key 'data.transforms[0].size': expected a number or a list of numbers, got "
            "'big' (in test.yaml)");
}

}  // namespace
}  // namespace loom
