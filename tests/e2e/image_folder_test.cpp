// `loom data synth-images` and `loom train` on a JPEG folder with corrupt files, as a user runs
// them: the run finishes, the bad files are skipped, the model learns.
#include <ATen/Context.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "e2e/json_output.h"
#include "tools/test_support.h"

namespace loom {
namespace {

// Files named *.jpg under `dir`, at any depth.
int jpegs_under(const std::string& dir) {
  int n = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir)) {
    n += entry.is_regular_file() && entry.path().extension() == ".jpg";
  }
  return n;
}

// 1% of the files are corrupt, one of each kind: the run finishes and counts every one.
TEST(ImageFolderRun, TrainsThroughCorruptFiles) {
  test::TempDir dir;
  auto train = test::run_loom("data synth-images " + (dir / "train") +
                              " --count 495 --classes 2 --width 72 --height 64");
  ASSERT_EQ(train.exit_code, 0) << train.output;
  EXPECT_EQ(jpegs_under(dir / "train"), 495);
  ASSERT_EQ(test::run_loom("data synth-images " + (dir / "val") +
                           " --count 40 --classes 2 --width 72 --height 64 --seed 7")
                .exit_code,
            0);
  test::write_corrupt_images(dir / "train/class_001",
                             test::read_text(dir / "train/class_001/img_000001.jpg"));

  auto r =
      test::run_loom("train --out " + (dir / "run") + " --set data=image_folder --set data.path=" +
                     (dir / "train") + " --set data.val_path=" + (dir / "val") +
                     " --set data.image_size=32 --set data.batch_size=50 --set model=cnn"
                     " --set train.epochs=2 --set schedule.warmup_steps=3 --set runtime.threads=1"
                     " --set data.workers=2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("bad_bomb.jpg"), std::string::npos) << r.output;  // the warning names it
  auto summary = nlohmann::json::parse(test::read_text(dir / "run/summary.json"));
  EXPECT_EQ(summary["steps"], 20);  // 500 files / 50 per batch = 10 steps per epoch
  const auto& bad = summary["data"]["bad_samples"];  // each file once per epoch
  EXPECT_EQ(bad["truncated"], 4) << bad;             // empty, truncated
  EXPECT_EQ(bad["undecodable"], 4) << bad;           // wrong magic, damaged scan
  EXPECT_EQ(bad["too_large"], 2) << bad;             // the 30000x30000 header
  EXPECT_EQ(summary["data"]["samples_read"], 1000);
  EXPECT_EQ(summary["data"]["substituted"], 0);  // data.bad_samples: skip, not replace
  // Two classes of distinct colour fields: chance is 50%.
  EXPECT_GT(summary["test_accuracy"].get<double>(), 0.85) << r.output;
}

TEST(ImageFolderRun, InspectCountsClassesSizesAndBadFiles) {
  test::TempDir dir;
  ASSERT_EQ(test::run_loom("data synth-images " + (dir / "d") +
                           " --count 30 --classes 2 --width 300 --height 200")
                .exit_code,
            0);
  test::write_corrupt_images(dir / "d/class_000",
                             test::read_text(dir / "d/class_000/img_000000.jpg"));
  auto r = test::run_loom("data inspect --decode --json --set data=image_folder --set data.path=" +
                          (dir / "d"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto report = test::json_line(r.output)["train"];
  EXPECT_EQ(report["samples"], 35);
  ASSERT_EQ(report["classes"].size(), 2u) << report.dump(2);
  // The classes count the samples that can be used; the 5 bad ones are counted apart.
  EXPECT_EQ(report["classes"][0]["samples"], 15);
  EXPECT_EQ(report["classes"][1]["samples"], 15);
  EXPECT_EQ(report["bad_total"], 5);
  // The bad files have no size: only the 30 good ones are measured.
  EXPECT_EQ(report["min_width"], 300);
  EXPECT_EQ(report["max_width"], 300);
  EXPECT_EQ(report["min_height"], 200);
  EXPECT_EQ(report["max_height"], 200);
  for (const auto& [bound, images] : report["by_longer_side"].items()) {
    EXPECT_EQ(images, bound == "512" ? 30 : 0) << bound;
  }
  const auto& bad = report["bad"];
  EXPECT_EQ(bad["unreadable"], 0) << bad;
  EXPECT_EQ(bad["truncated"], 2) << bad;
  EXPECT_EQ(bad["undecodable"], 2) << bad;
  EXPECT_EQ(bad["too_large"], 1) << bad;
  // Each bad file is listed with its reason; the listing names the file.
  ASSERT_EQ(report["bad_files"].size(), 5u) << report["bad_files"].dump(2);
  int bombs = 0;
  for (const auto& f : report["bad_files"]) {
    if (f["reason"] != "too_large") continue;
    ++bombs;
    EXPECT_NE(f["message"].get<std::string>().find("bad_bomb.jpg"), std::string::npos) << f;
  }
  EXPECT_EQ(bombs, 1);
}

// `loom data bench`: one JSON line per mode, and where the feeder may put batches.
TEST(ImageFolderBench, PrintsEachModeAndChecksTheDevice) {
  test::TempDir dir;
  ASSERT_EQ(
      test::run_loom("data synth-images " + (dir / "d") + " --count 40 --classes 2").exit_code, 0);
  const std::string base = "data bench --set data=image_folder --set data.path=" + (dir / "d") +
                           " --set data.batch_size=8 --set data.workers=2 --batches 3";
  for (const std::string mode : {"pipeline", "loader", "decode_only"}) {
    const std::string flag = mode == "loader"        ? " --loader-only"
                             : mode == "decode_only" ? " --decode-only"
                                                     : "";
    auto r = test::run_loom(base + flag);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    auto line = nlohmann::json::parse(r.output.substr(r.output.rfind('{')));
    EXPECT_EQ(line["mode"], mode);
    EXPECT_EQ(line["threads"], 2);
    EXPECT_GT(line["images_per_second"].get<double>(), 0.0);
    if (mode != "decode_only") {
      EXPECT_EQ(line["device"], "cpu");
      EXPECT_EQ(line["batches"], 3);
      EXPECT_GT(line["prefetch_budget_mb"].get<double>(), 0.0);
    }
  }
  const auto bogus = test::run_loom_reporting(base + " --device tpu:0");
  EXPECT_EQ(bogus.result.exit_code, 2);
  ASSERT_FALSE(bogus.error.is_null()) << bogus.result.output;
  EXPECT_EQ(bogus.error["fields"]["key"], "--device") << bogus.error.dump();
  EXPECT_EQ(bogus.error["fields"]["value"], "tpu:0") << bogus.error.dump();
  if (!at::hasCUDA()) {
    const auto cuda = test::run_loom_reporting(base + " --device cuda");
    EXPECT_EQ(cuda.result.exit_code, 2);
    ASSERT_FALSE(cuda.error.is_null()) << cuda.result.output;
    EXPECT_EQ(cuda.error["fields"]["problem"], "no_cuda") << cuda.error.dump();
  }
}

// A small model behind a heavy blur chain on one loader thread waits for data; the advisor
// says so and names the key to change. (That following the advice raises samples/s is a
// timing, measured in bench/, not asserted here.)
TEST(ImageFolderRun, InputBoundRunIsDiagnosedWithTheLoaderKey) {
  test::TempDir dir;
  ASSERT_EQ(test::run_loom("data synth-images " + (dir / "d") +
                           " --count 200 --classes 2 --width 320 --height 256")
                .exit_code,
            0);
  // Blurring the large crop before shrinking it makes each sample cost milliseconds.
  std::string blur = "[center_crop: 256";
  for (int i = 0; i < 10; ++i) blur += ", {gaussian_blur: {kernel: 11, sigma: 2}}";
  blur += ", resize: [24, 24]]";
  auto r = test::run_loom(
      "train --out " + (dir / "run") + " --set data=image_folder" +
      " --set data.path=" + (dir / "d") + " --set 'data.transforms=" + blur +
      "' --set data.batch_size=20 --set model=mlp --set train.epochs=2" +
      " --set data.workers=1 --set runtime.threads=1 --set checkpoint.enabled=false");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto summary = nlohmann::json::parse(test::read_text(dir / "run/summary.json"));
  const nlohmann::json* input_bound = nullptr;
  for (const auto& f : summary["findings"]) {
    if (f["id"] == "input_bound") input_bound = &f;
  }
  ASSERT_NE(input_bound, nullptr) << summary.dump(2);
  // One loader thread leaves cores to give it, but on a one-core host the advice is cheaper
  // transforms.
  const bool spare_cores = summary["machine"]["usable_cores"].get<int>() > 1;
  EXPECT_EQ((*input_bound)["key"], spare_cores ? "data.workers" : "data.transforms");
  EXPECT_GT((*input_bound)["max_gain"].get<double>(), 1.05);
  EXPECT_FALSE((*input_bound)["advice"].get<std::string>().empty()) << *input_bound;
  EXPECT_GT(summary["step_time"]["share"]["data_wait"].get<double>(), 0.05);
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
