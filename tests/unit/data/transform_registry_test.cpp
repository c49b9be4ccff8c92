// The transform registry: every entry form completed with its defaults, errors that name the
// entry, the parameter and where it was written, and a step made for every transform.
#include "loom/data/transform_registry.h"

#include <gtest/gtest.h>

#include "loom/core/error.h"

namespace loom::data {
namespace {

Config completed(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  return complete_transforms(parse_config(yaml, "test.yaml", overrides));
}

std::string config_error(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  try {
    completed(yaml, overrides);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "no error";
}

TEST(TransformRegistry, CompletesTheThreeEntryFormsWithDefaultsAndRoundTrips) {
  const Config c = completed(
      "data:\n"
      "  transforms:\n"
      "    - random_resized_crop: 224\n"
      "    - random_horizontal_flip\n"
      "    - gaussian_blur: {kernel: 11, sigma: [0.5, 1.5]}\n"
      "  eval_transforms: [resize: [8, 9]]\n");
  ASSERT_EQ(c.data.transforms.size(), 3u);
  EXPECT_EQ(c.data.transforms[0].params.at("size"), std::vector<double>{224});
  EXPECT_EQ(c.data.transforms[0].params.at("scale"), (std::vector<double>{0.08, 1.0}));
  EXPECT_TRUE(c.data.transforms[0].value.empty());
  EXPECT_EQ(c.data.transforms[1].params.at("p"), std::vector<double>{0.5});
  EXPECT_EQ(c.data.transforms[2].params.at("sigma"), (std::vector<double>{0.5, 1.5}));
  EXPECT_EQ(c.data.eval_transforms[0].params.at("size"), (std::vector<double>{8, 9}));
  // The written configuration (config.yaml of a run) reads back to the same completed lists.
  const Config again = completed(config_to_yaml(c));
  EXPECT_EQ(again.data.transforms, c.data.transforms);
  EXPECT_EQ(config_to_yaml(again), config_to_yaml(c));
  EXPECT_EQ(describe_transform(c.data.transforms[1]), "random_horizontal_flip(p=0.5)");
}

TEST(TransformRegistry, ErrorsNameTheEntryTheParameterAndWhereItWasWritten) {
  EXPECT_EQ(config_error("data: {transforms: [center_crop: 20, gausian_blur: 3]}\n"),
            "config key 'data.transforms[1]': unknown transform 'gausian_blur'; did you mean "
            "'gaussian_blur'? (known: random_resized_crop, resize, center_crop, random_crop, "
            "random_horizontal_flip, gaussian_blur or normalize) (in test.yaml)");
  EXPECT_EQ(config_error("data: {transforms: [gaussian_blur: {kernel: 4}]}\n"),
            "config key 'data.transforms[0].kernel': sizes must be odd, got 4 (in test.yaml)");
  EXPECT_EQ(config_error("data: {transforms: [resize: {size: 8, sise: 3}]}\n"),
            "config key 'data.transforms[0]': resize has no parameter 'sise'; did you mean "
            "'size'? (in test.yaml)");
  EXPECT_EQ(config_error("data: {transforms: [center_crop]}\n"),
            "config key 'data.transforms[0]': center_crop needs 'size' (output side, or [height, "
            "width]) (in test.yaml)");
  EXPECT_EQ(config_error("", {"data.transforms=[random_resized_crop: {size: 8, scale: [1, 0.5]}]"}),
            "config key 'data.transforms[0].scale': give [low, high], got [1, 0.5] (from --set)");
  EXPECT_EQ(config_error("data: {eval_transforms: [center_crop: [8, 8, 8]]}\n"),
            "config key 'data.eval_transforms[0].size': expected 1 to 2 number(s), got 3 (in "
            "test.yaml)");
  EXPECT_EQ(config_error("data: {transforms: [random_crop: {size: 8, padding: 1.5}]}\n"),
            "config key 'data.transforms[0].padding': must be a whole number, got 1.5 (in "
            "test.yaml)");
  EXPECT_EQ(config_error("data: {transforms: [random_horizontal_flip: 2]}\n"),
            "config key 'data.transforms[0].p': a probability must be <= 1 (in test.yaml)");
}

// Every transform but normalize (which the feeder applies) makes a step from its defaults plus
// its required parameters; window moves are geometric, the others run on pixels.
TEST(TransformRegistry, EveryTransformMakesItsStep) {
  ASSERT_EQ(transform_registry().size(), 7u);
  for (const auto& spec : transform_registry()) {
    SCOPED_TRACE(spec.name);
    EXPECT_EQ(find_transform(spec.name), &spec);
    EXPECT_FALSE(std::string(spec.help).empty());
    TransformConfig t{spec.name, {}};
    for (const auto& p : spec.params) {
      if (p.defaults.empty()) t.params[p.name] = std::vector<double>(size_t(p.min_values), 3);
    }
    complete_transform(t, "t");
    if (spec.name == std::string("normalize")) {
      EXPECT_EQ(spec.make, nullptr);
      continue;
    }
    ASSERT_NE(spec.make, nullptr);
    const TransformStep step = spec.make(t);
    EXPECT_EQ(step.geometric(), step.apply == nullptr);
    if (step.geometric()) EXPECT_EQ(step.height, 3);
  }
  EXPECT_EQ(find_transform("no_such_transform"), nullptr);
}

}  // namespace
}  // namespace loom::data
