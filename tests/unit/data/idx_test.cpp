#include "loom/data/idx.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <filesystem>

#include "loom/core/error.h"
#include "loom/core/settings.h"
#include "tools/test_support.h"

namespace loom::data {
namespace {

std::string idx_bytes(const std::vector<uint32_t>& dims, const std::vector<uint8_t>& data) {
  std::string out = {0, 0, 8, static_cast<char>(dims.size())};
  for (uint32_t d : dims) {
    for (int shift = 24; shift >= 0; shift -= 8)
      out.push_back(static_cast<char>((d >> shift) & 0xff));
  }
  out.append(data.begin(), data.end());
  return out;
}

void write_gz(const std::string& path, const std::string& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(f);
}

TEST(Idx, ReadsRawAndGzipFiles) {
  test::TempDir dir;
  std::vector<uint8_t> pixels(2 * 3 * 4);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>(i * 7);
  test::write_text(dir / "raw", idx_bytes({2, 3, 4}, pixels));
  write_gz(dir / "packed.gz", idx_bytes({2, 3, 4}, pixels));
  for (const std::string name : {"raw", "packed.gz"}) {
    at::Tensor t = read_idx(dir / name);
    EXPECT_EQ(t.sizes(), (at::IntArrayRef{2, 3, 4}));
    EXPECT_EQ(t[1][2][3].item<int>(), pixels[23]);
  }
}

TEST(Idx, MalformedFilesNameThePath) {
  test::TempDir dir;
  test::write_text(dir / "bad_magic", std::string("\x00\x00\x0d\x01\x00\x00\x00\x01\x05", 9));
  test::write_text(dir / "truncated", idx_bytes({10}, {1, 2, 3}));
  for (const std::string name : {"bad_magic", "truncated", "missing"}) {
    try {
      read_idx(dir / name);
      FAIL() << name << " was accepted";
    } catch (const DataError& e) {
      EXPECT_NE(std::string(e.what()).find(dir / name), std::string::npos) << e.what();
    }
  }
}

TEST(Idx, MissingFolderNamesTheDebianPackage) {
  try {
    load_idx_split("/nonexistent/fashion", "train", "dataset-fashion-mnist");
    FAIL();
  } catch (const DataError& e) {
    EXPECT_STREQ(e.what(),
                 "data folder '/nonexistent/fashion' does not exist; install the Debian package "
                 "dataset-fashion-mnist (apt-get install dataset-fashion-mnist) or set data.path");
  }
}

TEST(Idx, LoadsFashionMnist) {
  const std::string dir = setting("LOOM_FASHION_MNIST_DIR");
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << "Fashion-MNIST not installed at " << dir;
  ImageSet test = load_idx_split(dir, "t10k", "dataset-fashion-mnist");
  EXPECT_EQ(test.images.sizes(), (at::IntArrayRef{10000, 28, 28, 1}));
  EXPECT_EQ(test.classes, 10);
  // Fashion-MNIST's test split is balanced: 1000 images of each class.
  at::Tensor counts = at::bincount(test.labels);
  EXPECT_TRUE(counts.eq(1000).all().item<bool>());
}

}  // namespace
}  // namespace loom::data
