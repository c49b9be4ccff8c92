#include "loom/data/image_loader.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "loom/core/error.h"
#include "loom/data/image_folder.h"
#include "loom/data/synthetic_images.h"
#include "tools/test_support.h"

namespace loom::data {
namespace {

LoaderOptions small_options(int threads) {
  LoaderOptions o;
  o.batch_size = 8;
  o.threads = threads;
  o.prefetch_batches = 3;
  o.seed = 9;
  o.transform.crop.size = 32;
  o.transform.max_pixels = 100'000'000;
  return o;
}

std::shared_ptr<ImageFolder> make_folder(const test::TempDir& dir, int64_t count) {
  SyntheticFolderSpec spec;
  spec.count = count;
  spec.classes = 3;
  spec.width = 96;
  spec.height = 80;
  write_synthetic_image_folder(dir / "images", spec);
  return std::make_shared<ImageFolder>(dir / "images");
}

TEST(ImageFolder, ClassesAreSortedSubfoldersAndOtherFilesAreIgnored) {
  test::TempDir dir;
  auto folder = make_folder(dir, 12);
  test::write_text(dir / "images/class_001/notes.txt", "not an image");
  ImageFolder again(dir / "images");
  EXPECT_EQ(again.size(), 12);
  EXPECT_EQ(again.class_names(), (std::vector<std::string>{"class_000", "class_001", "class_002"}));
  EXPECT_EQ(again.read(0).label, 0);
  EXPECT_EQ(again.read(11).label, 2);
  EXPECT_NE(again.read(4).key.find("class_001/img_000001.jpg"), std::string::npos);
  EXPECT_THROW(ImageFolder(dir / "absent"), DataError);
}

// Batches are a pure function of (epoch, step): any thread count, any request order.
TEST(ImageLoader, OutputIsIdenticalForAnyThreadCountAndOrder) {
  test::TempDir dir;
  auto folder = make_folder(dir, 40);
  EpochOrder order(40, 9);
  ImageLoader one(folder, order, small_options(1));
  ImageLoader three(folder, order, small_options(3));
  ASSERT_EQ(one.steps_per_epoch(), 5);
  for (int64_t epoch : {0, 1}) {
    for (int64_t step = 0; step < 5; ++step) {
      Batch a = one.batch(epoch, step), b = three.batch(epoch, step);
      ASSERT_EQ(a.images.sizes(), (at::IntArrayRef{8, 32, 32, 3}));
      EXPECT_TRUE(a.images.equal(b.images)) << "epoch " << epoch << " step " << step;
      EXPECT_TRUE(a.labels.equal(b.labels));
      for (int64_t i = 0; i < 8; ++i) {
        EXPECT_EQ(a.labels[i].item<int64_t>(),
                  folder->read(order.index_at(epoch, step * 8 + i)).label);
      }
    }
  }
  // A jump (as after resume) gives the same batch as getting there in order.
  EXPECT_TRUE(three.batch(1, 3).images.equal(one.build_batch(1, 3).images));
  EXPECT_TRUE(three.batch(0, 2).images.equal(one.build_batch(0, 2).images));
  // Augmentation differs between epochs.
  EXPECT_FALSE(one.build_batch(0, 0).images.equal(one.build_batch(1, 0).images));
}

TEST(ImageLoader, EvaluationCropsAreDeterministicAndKeepTheLastBatch) {
  test::TempDir dir;
  auto folder = make_folder(dir, 20);
  LoaderOptions o = small_options(2);
  o.transform.train = false;
  o.drop_last = false;
  ImageLoader loader(folder, EpochOrder(20, 0, false), o);
  EXPECT_EQ(loader.steps_per_epoch(), 3);
  EXPECT_EQ(loader.batch(0, 2).labels.size(0), 4);
  EXPECT_TRUE(loader.batch(0, 0).images.equal(loader.batch(5, 0).images));
  EXPECT_THROW(loader.batch(0, 3), Error);  // past the epoch: at once, not after a timeout
}

// A folder with corrupt files of every kind trains through: each is counted, none crashes.
TEST(ImageLoader, CorruptFilesAreCountedByReasonAndSkipped) {
  test::TempDir dir;
  auto clean = make_folder(dir, 60);
  const std::string good = clean->read(0).bytes;
  const std::string cls = dir / "images/class_000/";
  test::write_text(cls + "bad_empty.jpg", "");
  test::write_text(cls + "bad_truncated.jpg", good.substr(0, good.size() / 3));
  test::write_text(cls + "bad_magic.jpg", "BM" + good.substr(2));
  std::string bomb = good;
  const size_t frame = bomb.find("\xFF\xC0");
  for (size_t at : {frame + 5, frame + 7}) {
    bomb[at] = static_cast<char>(30000 >> 8);
    bomb[at + 1] = static_cast<char>(30000 & 0xFF);
  }
  test::write_text(cls + "bad_bomb.jpg", bomb);
  std::string damaged = good;
  // Damage inside the entropy-coded data that a decoder can detect: stray markers. (JPEG has
  // no checksum; a flip that still decodes to valid codes cannot be told from real content.)
  for (size_t i = damaged.size() / 2; i < damaged.size() / 2 + 32; i += 2) {
    damaged[i] = '\xFF';
    damaged[i + 1] = '\xD9';
  }
  test::write_text(cls + "bad_damaged.jpg", damaged);

  auto folder = std::make_shared<ImageFolder>(dir / "images");
  ASSERT_EQ(folder->size(), 65);
  LoaderOptions o = small_options(2);
  o.batch_size = 13;
  o.max_bad_fraction = 0.5;
  ImageLoader loader(folder, EpochOrder(65, 1), o);
  int64_t images = 0;
  for (int64_t step = 0; step < loader.steps_per_epoch(); ++step)
    images += loader.batch(0, step).labels.size(0);
  LoaderStats s = loader.stats();
  EXPECT_EQ(s.samples, 65);
  EXPECT_EQ(s.bad[static_cast<int>(SampleFault::kTruncated)], 2);    // empty, truncated
  EXPECT_EQ(s.bad[static_cast<int>(SampleFault::kUndecodable)], 2);  // wrong magic, damaged scan
  EXPECT_EQ(s.bad[static_cast<int>(SampleFault::kTooLarge)], 1);     // the 30000x30000 header
  EXPECT_EQ(images, 60);
}

TEST(ImageLoader, FailPolicyAndBadFractionStopTheRunWithTheReason) {
  test::TempDir dir;
  auto clean = make_folder(dir, 30);
  test::write_text(dir / "images/class_000/zero.jpg", "");
  auto folder = std::make_shared<ImageFolder>(dir / "images");
  LoaderOptions o = small_options(2);
  o.batch_size = 31;
  o.policy = BadSamplePolicy::kFail;
  ImageLoader failing(folder, EpochOrder(31, 0, false), o);
  try {
    failing.batch(0, 0);
    FAIL();
  } catch (const SampleError& e) {
    EXPECT_EQ(e.fault(), SampleFault::kTruncated);
    EXPECT_NE(std::string(e.what()).find("zero.jpg"), std::string::npos);
  }
}

}  // namespace
}  // namespace loom::data
