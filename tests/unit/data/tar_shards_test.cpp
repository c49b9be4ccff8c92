#include "loom/data/tar_shards.h"

#include <gtest/gtest.h>

#include "loom/core/error.h"
#include "loom/data/image_codec.h"
#include "loom/data/loader.h"
#include "tools/test_support.h"

namespace loom::data {
namespace {

// Shards written by Python's tarfile: the pax format it uses by default (a path over 100
// characters gets an 'x' header), GNU format ('L' long names), and metadata members a loader
// must ignore.
class TarShardsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    python_ = test::torch_python();
    if (python_.empty()) GTEST_SKIP() << "no python3";
    for (int i = 0; i < 10; ++i) {
      at::Tensor pixels = at::full({20 + i, 30, 3}, 20 * i, at::kByte);
      images_.push_back(encode_jpeg(pixels, 90));
      test::write_text(dir_ / ("img" + std::to_string(i) + ".jpg"), images_.back());
    }
    test::write_text(dir_ / "make_shards.py", R"(
import io, os, sys, tarfile
d = sys.argv[1]
os.makedirs(d + '/shards')
def add(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))
long_dir = 'a' * 60 + '/' + 'b' * 50
for shard, (fmt, first, last) in enumerate([(tarfile.PAX_FORMAT, 0, 4),
                                            (tarfile.GNU_FORMAT, 4, 8),
                                            (tarfile.PAX_FORMAT, 8, 10)]):
    with tarfile.open('%s/shards/train-%03d.tar' % (d, shard), 'w', format=fmt) as tar:
        for i in range(first, last):
            key = ('%s/sample%04d' % (long_dir, i)) if i % 3 == 0 else 'sample%04d' % i
            add(tar, key + '.jpg', open('%s/img%d.jpg' % (d, i), 'rb').read())
            add(tar, key + '.cls', str(i % 4).encode())
            add(tar, key + '.json', b'{"ignored": true}')
)");
    const auto r = test::run_command(python_ + " " + (dir_ / "make_shards.py") + " " + dir_.path());
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }

  std::string python_;
  test::TempDir dir_;
  std::vector<std::string> images_;
};

TEST_F(TarShardsTest, ReadsEverySampleWithItsLabelInShardOrder) {
  TarShards shards(dir_ / "shards");
  EXPECT_EQ(shards.shard_count(), 3);
  ASSERT_EQ(shards.size(), 10);
  EXPECT_EQ(shards.class_names(), (std::vector<std::string>{"0", "1", "2", "3"}));
  for (int64_t i = 0; i < 10; ++i) {
    const Sample s = shards.read(i);
    EXPECT_EQ(s.bytes, images_[static_cast<size_t>(i)]) << i;
    EXPECT_EQ(s.label, i % 4);
    EXPECT_NE(s.key.find("sample" + std::string(i < 10 ? "000" : "00") + std::to_string(i)),
              std::string::npos)
        << s.key;
  }
  EXPECT_NE(shards.read(3).key.find(std::string(60, 'a') + "/" + std::string(50, 'b')),
            std::string::npos);
  // One shard on its own.
  EXPECT_EQ(TarShards(dir_ / "shards/train-001.tar").size(), 4);
}

TEST_F(TarShardsTest, LoadsBatchesThroughTheLoader) {
  auto shards = std::make_shared<TarShards>(dir_ / "shards");
  LoaderOptions o;
  o.batch_size = 5;
  o.threads = 2;
  o.transforms = std::make_shared<TransformPipeline>(default_eval_transforms(16), 3, 0, 0, "t");
  Loader loader(shards, EpochOrder(10, 0, false), o);
  const Batch b = loader.batch(0, 1);
  ASSERT_EQ(b.inputs.sizes(), (at::IntArrayRef{5, 16, 16, 3}));
  EXPECT_EQ(b.targets[0].item<int64_t>(), 5 % 4);
  // Image i is flat grey 20 * i (up to JPEG rounding).
  EXPECT_NEAR(b.inputs[2].to(at::kFloat).mean().item<float>(), 20 * 7, 2.0);
}

TEST_F(TarShardsTest, ACutShortShardKeepsTheSamplesBeforeTheCut) {
  const std::string whole = test::read_text(dir_ / "shards/train-000.tar");
  test::write_text(dir_ / "cut.tar", whole.substr(0, whole.size() / 2));
  TarShards cut(dir_ / "cut.tar");
  EXPECT_GE(cut.size(), 1);
  EXPECT_LT(cut.size(), 4);
  EXPECT_EQ(cut.read(0).bytes, images_[0]);
}

TEST(TarShards, MissingShardsAndLabelsAreNamed) {
  test::TempDir dir;
  EXPECT_THROW(TarShards(dir / "absent"), DataError);
  try {
    TarShards empty(dir.path());
    FAIL();
  } catch (const DataError& e) {
    EXPECT_EQ(e.field("problem"), "no_shards") << e.what();
    EXPECT_EQ(e.field("path"), dir.path());
  }
}

}  // namespace
}  // namespace loom::data
