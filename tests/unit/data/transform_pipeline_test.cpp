#include "loom/data/transform_pipeline.h"

#include <gtest/gtest.h>

#include "loom/core/error.h"
#include "loom/data/transform_registry.h"
#include "tools/test_support.h"

namespace loom::data {
namespace {

TransformConfig step(const std::string& name, std::map<std::string, std::vector<double>> params) {
  TransformConfig t{name, std::move(params)};
  complete_transform(t, "test");
  return t;
}

TransformPipeline pipeline(std::vector<TransformConfig> list, int channels = 3, int h = 0,
                           int w = 0) {
  return TransformPipeline(list, channels, h, w, "data.transforms");
}

at::Tensor run(const TransformPipeline& p, const at::Tensor& image, uint64_t key = 1) {
  at::Tensor out = at::empty({p.height(), p.width(), p.channels()}, at::kByte);
  KeyedRng rng(key);
  p.run_pixels(image, rng, out);
  return out;
}

at::Tensor random_image(int64_t h, int64_t w, int64_t c) {
  at::manual_seed(11);
  return at::randint(0, 256, {h, w, c}, at::kByte);
}

float max_difference(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kFloat) - b.to(at::kFloat)).abs().max().item<float>();
}

// Each transform against torchvision's functional op on the same pixels (the
// project environment's torchvision): crops and flips exactly, resize and blur within one level
// (OpenCV rounds in fixed point, torchvision in float).
TEST(TransformPipeline, EachTransformMatchesTorchvision) {
  const std::string python = test::torch_python();
  if (python.empty()) GTEST_SKIP() << "no python3 with torch";
  test::TempDir dir;
  const at::Tensor image = random_image(37, 53, 3);
  test::write_text(dir / "image.raw",
                   std::string(reinterpret_cast<const char*>(image.data_ptr<uint8_t>()),
                               static_cast<size_t>(image.numel())));
  test::write_text(dir / "reference.py", R"(
import sys, torch
import torchvision.transforms.functional as F
d = sys.argv[1]
img = torch.frombuffer(bytearray(open(d + '/image.raw', 'rb').read()), dtype=torch.uint8)
img = img.reshape(37, 53, 3).permute(2, 0, 1)
cases = {
  'resize_short': F.resize(img, 24, antialias=False),
  'resize_hw': F.resize(img, [20, 31], antialias=False),
  'resize_up': F.resize(img, [61, 80], antialias=False),
  'center_crop': F.center_crop(img, [21, 25]),
  'center_crop_pad': F.center_crop(img, [45, 60]),
  'center_crop_pad_w': F.center_crop(img, [30, 60]),
  'blur_square': F.gaussian_blur(img, [11, 11], [1.7, 1.7]),
  'blur_oblong': F.gaussian_blur(img, [9, 5], [0.8, 0.8]),
  'flip': F.hflip(img),
  'resize_center_crop': F.center_crop(F.resize(img, 40, antialias=False), 36),
}
for name, out in cases.items():
    open(d + '/' + name + '.raw', 'wb').write(out.permute(1, 2, 0).contiguous().numpy().tobytes())
)");
  const test::CommandResult py =
      test::run_command(python + " " + (dir / "reference.py") + " " + dir.path());
  ASSERT_EQ(py.exit_code, 0) << py.output;
  auto reference = [&](const std::string& name, int64_t h, int64_t w) {
    const std::string bytes = test::read_text(dir / (name + ".raw"));
    EXPECT_EQ(bytes.size(), static_cast<size_t>(h * w * 3)) << name;
    return at::from_blob(const_cast<char*>(bytes.data()), {h, w, 3}, at::kByte).clone();
  };
  struct Case {
    std::string name;
    std::vector<TransformConfig> list;
    int64_t h, w;
    float tolerance;
  };
  const std::vector<Case> cases = {
      {"resize_short", {step("resize", {{"size", {24}}})}, 24, 34, 1},
      {"resize_hw", {step("resize", {{"size", {20, 31}}})}, 20, 31, 1},
      {"resize_up", {step("resize", {{"size", {61, 80}}})}, 61, 80, 1},
      {"center_crop", {step("center_crop", {{"size", {21, 25}}})}, 21, 25, 0},
      {"center_crop_pad", {step("center_crop", {{"size", {45, 60}}})}, 45, 60, 0},
      {"center_crop_pad_w", {step("center_crop", {{"size", {30, 60}}})}, 30, 60, 0},
      {"blur_square", {step("gaussian_blur", {{"kernel", {11}}, {"sigma", {1.7}}})}, 37, 53, 1},
      // torchvision's kernel_size is [x, y]; Loom's, like its sizes, [height, width].
      {"blur_oblong", {step("gaussian_blur", {{"kernel", {5, 9}}, {"sigma", {0.8}}})}, 37, 53, 1},
      {"flip", {step("random_horizontal_flip", {{"p", {1}}})}, 37, 53, 0},
      {"resize_center_crop",
       {step("resize", {{"size", {40}}}), step("center_crop", {{"size", {36}}})},
       36,
       36,
       1},
  };
  for (const auto& c : cases) {
    const TransformPipeline p = pipeline(c.list, 3, 37, 53);
    ASSERT_EQ(p.height(), c.h) << c.name;
    ASSERT_EQ(p.width(), c.w) << c.name;
    EXPECT_LE(max_difference(run(p, image), reference(c.name, c.h, c.w)), c.tolerance) << c.name;
  }
}

TEST(TransformPipeline, RandomResizedCropIsTheSampledWindowResized) {
  const at::Tensor image = random_image(60, 80, 3);
  const TransformPipeline p = pipeline({step("random_resized_crop", {{"size", {24}}})});
  for (uint64_t key : {1, 2, 3}) {
    KeyedRng rng(key);
    const CropRect r = sample_resized_crop(80, 60, ResizedCropSpec{}, rng);
    at::Tensor expected = at::empty({24, 24, 3}, at::kByte);
    resize_into(image.slice(0, r.y, r.y + r.height).slice(1, r.x, r.x + r.width), expected);
    EXPECT_TRUE(run(p, image, key).equal(expected)) << key;
  }
}

TEST(TransformPipeline, RandomCropWithPaddingShiftsTheImage) {
  const at::Tensor image = random_image(8, 8, 1);
  const TransformPipeline p =
      pipeline({step("random_crop", {{"size", {8}}, {"padding", {3}}})}, 1, 8, 8);
  int shifted = 0;
  for (uint64_t key = 0; key < 20; ++key) {
    const at::Tensor out = run(p, image, key);
    at::Tensor padded = at::zeros({14, 14, 1}, at::kByte);
    padded.slice(0, 3, 11).slice(1, 3, 11).copy_(image);
    bool found = false;
    for (int y = 0; y <= 6 && !found; ++y) {
      for (int x = 0; x <= 6 && !found; ++x) {
        found = padded.slice(0, y, y + 8).slice(1, x, x + 8).equal(out);
      }
    }
    EXPECT_TRUE(found) << "key " << key;
    shifted += !out.equal(image);
  }
  EXPECT_GT(shifted, 10);
}

// The fused path (decode only the window) equals decoding everything and applying each step,
// exactly for PNG (no DCT scaling, whole-pixel windows).
TEST(TransformPipeline, DecodingOnlyTheWindowEqualsTheStepByStepReference) {
  const at::Tensor image = random_image(90, 120, 3);
  const std::string png = encode_png(image);
  const TransformPipeline augment =
      pipeline({step("random_resized_crop", {{"size", {32}}}), step("random_horizontal_flip", {}),
                step("gaussian_blur", {{"kernel", {5}}, {"sigma", {0.5, 1.5}}})});
  for (uint64_t key = 0; key < 10; ++key) {
    at::Tensor fused = at::empty({32, 32, 3}, at::kByte);
    KeyedRng rng(key);
    augment.run_encoded(png, "test.png", 0, rng, fused);
    EXPECT_TRUE(fused.equal(run(augment, image, key))) << key;
  }
  // Folding resize + crop resamples once, on a window rounded to whole source pixels: close to
  // resampling twice on a photo-like (smooth) image, not equal.
  const at::Tensor smooth =
      at::upsample_bilinear2d(
          image.permute({2, 0, 1}).unsqueeze(0).to(at::kFloat).slice(2, 0, 12).slice(3, 0, 16),
          {360, 480}, false)
          .squeeze(0)
          .permute({1, 2, 0})
          .round()
          .to(at::kByte)
          .contiguous();
  const TransformPipeline eval = pipeline(default_eval_transforms(32));
  at::Tensor fused = at::empty({32, 32, 3}, at::kByte);
  KeyedRng rng(0);
  eval.run_encoded(encode_png(smooth), "test.png", 0, rng, fused);
  EXPECT_LT((fused.to(at::kFloat) - run(eval, smooth).to(at::kFloat)).abs().mean().item<float>(),
            3.0f);
  // A JPEG decoded at 1/2 or 1/4 scale stays close to the full-resolution reference.
  const std::string jpeg = encode_jpeg(smooth, 95);
  const TransformPipeline shrink = pipeline({step("resize", {{"size", {64, 64}}})});
  at::Tensor scaled = at::empty({64, 64, 3}, at::kByte);
  shrink.run_encoded(jpeg, "test.jpg", 0, rng, scaled);
  EXPECT_LT((scaled.to(at::kFloat) - run(shrink, smooth).to(at::kFloat)).abs().mean().item<float>(),
            3.0f);
}

TEST(TransformPipeline, BadListsAreConfigErrorsNamingTheKey) {
  // What the ConfigError's fields say is wrong: "KEY PROBLEM value/expected".
  auto refusal = [](const std::vector<TransformConfig>& list, int h = 0, int w = 0) {
    try {
      pipeline(list, 3, h, w);
    } catch (const ConfigError& e) {
      return e.key() + " " + e.field("problem") + " " + e.field("value") + "/" +
             e.field("expected");
    }
    return std::string("no error");
  };
  EXPECT_EQ(refusal({step("resize", {{"size", {64}}})}), "data.transforms size_varies /");
  EXPECT_EQ(refusal({step("random_horizontal_flip", {})}), "data.transforms size_varies /");
  EXPECT_EQ(refusal({step("resize", {{"size", {64}}})}, 28, 28), "no error");
  EXPECT_EQ(refusal({step("gaussian_blur", {{"kernel", {61}}})}, 28, 28),
            "data.transforms kernel_too_large 61x61/");
  EXPECT_EQ(refusal({step("normalize", {{"mean", {0.5}}, {"std", {0.2}}}),
                     step("center_crop", {{"size", {8}}})}),
            "data.transforms[0] not_last normalize/");
  EXPECT_EQ(refusal({step("center_crop", {{"size", {8}}}),
                     step("normalize", {{"mean", {0.5, 0.5}}, {"std", {0.2, 0.2}}})}),
            "data.transforms[1] channels 2/3");
  TransformConfig unknown{"gausian_blur", {}};
  try {
    complete_transform(unknown, "data.transforms[1]");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.key(), "data.transforms[1]");
    EXPECT_EQ(e.field("problem"), "unknown_transform");
    EXPECT_EQ(e.field("value"), "gausian_blur");
    EXPECT_EQ(e.field("suggestion"), "gaussian_blur");
  }
  TransformConfig even{"gaussian_blur", {{"kernel", {4}}}};
  EXPECT_THROW(complete_transform(even, "k"), ConfigError);
}

TEST(TransformPipeline, NormalizeIsHandedToTheFeeder) {
  const TransformPipeline p = pipeline({step("center_crop", {{"size", {8}}}),
                                        step("normalize", {{"mean", {0.5}}, {"std", {0.25}}})});
  ASSERT_TRUE(p.normalize().has_value());
  EXPECT_EQ(p.normalize()->mean, (std::vector<double>{0.5, 0.5, 0.5}));
  EXPECT_EQ(p.steps().size(), 1u);
}

}  // namespace
}  // namespace loom::data
