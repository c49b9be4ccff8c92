// `loom data synth-images` and `loom train` on a JPEG folder with corrupt files, as a user runs
// them: the run finishes, the bad files are skipped, the model learns.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tools/test_support.h"

namespace loom {
namespace {

TEST(ImageFolderRun, TrainsThroughCorruptFiles) {
  test::TempDir dir;
  auto train = test::run_loom("data synth-images " + (dir / "train") +
                              " --count 200 --classes 2 --width 72 --height 64");
  ASSERT_EQ(train.exit_code, 0) << train.output;
  EXPECT_NE(train.output.find("wrote 200 JPEGs"), std::string::npos) << train.output;
  ASSERT_EQ(test::run_loom("data synth-images " + (dir / "val") +
                           " --count 40 --classes 2 --width 72 --height 64 --seed 7")
                .exit_code,
            0);
  test::write_text(dir / "train/class_000/broken.jpg", "");
  test::write_text(dir / "train/class_001/not_a_jpeg.jpg", "GIF89a....");

  auto r =
      test::run_loom("train --out " + (dir / "run") + " --set data=image_folder --set data.path=" +
                     (dir / "train") + " --set data.val_path=" + (dir / "val") +
                     " --set data.image_size=32 --set data.batch_size=20 --set model=cnn"
                     " --set train.epochs=5 --set schedule.warmup_steps=3 --set runtime.threads=1"
                     " --set data.workers=2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("skipping a bad sample (truncated)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("skipping a bad sample (undecodable)"), std::string::npos) << r.output;
  auto summary = nlohmann::json::parse(test::read_text(dir / "run/summary.json"));
  EXPECT_EQ(summary["steps"], 50);  // 202 files / 20 per batch = 10 steps per epoch
  // Two classes of distinct colour fields: chance is 50%; 5 epochs reach 100% here.
  EXPECT_GT(summary["test_accuracy"].get<double>(), 0.85) << r.output;
}

TEST(ImageFolderRun, MissingFolderIsNamed) {
  test::TempDir dir;
  auto r = test::run_loom("train --out " + (dir / "run") +
                          " --set data=image_folder --set data.path=/nonexistent/imgs");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("'/nonexistent/imgs'"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace loom
