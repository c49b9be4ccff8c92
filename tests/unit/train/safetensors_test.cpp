#include "loom/train/safetensors.h"

#include <gtest/gtest.h>

#include "loom/core/error.h"
#include "tools/test_support.h"

namespace loom::train {
namespace {

TEST(Safetensors, EncodesTheSpecifiedLayoutByteForByte) {
  std::string bytes = encode_safetensors({{"a", at::tensor({1.0f, 2.0f})}});
  std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  header.append((8 - header.size() % 8) % 8, ' ');  // data starts 8-byte aligned
  std::string expected(8, '\0');
  expected[0] = static_cast<char>(header.size());
  expected += header;
  expected += std::string("\x00\x00\x80\x3f\x00\x00\x00\x40", 8);  // 1.0f, 2.0f little-endian
  EXPECT_EQ(bytes, expected);
}

TEST(Safetensors, RoundTripsEveryDtypeShapeAndOrder) {
  test::TempDir dir;
  models::NamedTensors tensors = {
      {"z.weight", at::randn({3, 4, 2, 2}).contiguous(at::MemoryFormat::ChannelsLast)},
      {"a.bf16", at::randn({5}).to(at::kBFloat16)},
      {"half", at::randn({2, 2}).to(at::kHalf)},
      {"double", at::randn({3}, at::kDouble)},
      {"long", at::arange(7, at::kLong)},
      {"int", at::arange(3, at::kInt)},
      {"bytes", at::arange(9, at::kByte).view({3, 3})},
      {"flags", at::tensor({1, 0, 1}).to(at::kBool)},
      {"scalar", at::scalar_tensor(42, at::kLong)},
      {"empty", at::empty({0, 3})}};
  write_safetensors(dir / "t.safetensors", tensors, {{"step", "12"}});
  models::NamedTensors back = read_safetensors(dir / "t.safetensors");
  ASSERT_EQ(back.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    EXPECT_EQ(back[i].first, tensors[i].first);
    EXPECT_EQ(back[i].second.scalar_type(), tensors[i].second.scalar_type()) << back[i].first;
    EXPECT_TRUE(back[i].second.equal(tensors[i].second)) << back[i].first;
  }
}

// Tensors fetched one at a time as the writer reaches them (a pipeline's other ranks' shares)
// make the same file as tensors held in memory; at most one is fetched before it is written.
// read_safetensors maps the file: tensors over its pages where their bytes are aligned (a copy
// where not, as the float after three bf16 values is), and a private mapping, so writing into a
// tensor read does not write the file.
TEST(Safetensors, ReadTensorsMapTheFileAndWritingThemLeavesItAlone) {
  test::TempDir dir;
  const models::NamedTensors tensors = {{"first", at::arange(6, at::kFloat)},
                                        {"odd", at::randn({3}).to(at::kBFloat16)},
                                        {"after_odd", at::randn({2, 2})}};
  write_safetensors(dir / "t.safetensors", tensors);
  models::NamedTensors back = read_safetensors(dir / "t.safetensors");
  ASSERT_EQ(back.size(), 3u);
  for (std::size_t i = 0; i < back.size(); ++i) {
    EXPECT_TRUE(at::equal(back[i].second, tensors[i].second)) << back[i].first;
  }
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(back[2].second.data_ptr()) % 4, 0u);
  back[0].second.add_(1);
  back[2].second.mul_(2);
  const models::NamedTensors again = read_safetensors(dir / "t.safetensors");
  EXPECT_TRUE(at::equal(again[0].second, tensors[0].second));
  EXPECT_TRUE(at::equal(again[2].second, tensors[2].second));
  EXPECT_TRUE(at::equal(back[0].second, tensors[0].second + 1));
}

TEST(Safetensors, TensorsFetchedOneAtATimeMakeTheSameFile) {
  test::TempDir dir;
  const models::NamedTensors tensors = {{"w", at::randn({4, 3})},
                                        {"b", at::randn({3}).to(at::kBFloat16)},
                                        {"steps", at::arange(5, at::kLong)},
                                        {"empty", at::empty({0})}};
  write_safetensors(dir / "held.safetensors", tensors, {{"step", "3"}});
  std::vector<TensorToFetch> lazy;
  int fetched = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const at::Tensor t = tensors[i].second;
    lazy.push_back({tensors[i].first, t.scalar_type(), t.sizes().vec(), [&fetched, i, t] {
                      EXPECT_EQ(fetched, static_cast<int>(i));  // in order, one at a time
                      ++fetched;
                      return t.clone();
                    }});
  }
  write_safetensors(dir / "fetched.safetensors", lazy, {{"step", "3"}});
  EXPECT_EQ(fetched, 4);
  EXPECT_EQ(test::read_text(dir / "fetched.safetensors"),
            test::read_text(dir / "held.safetensors"));

  // A tensor that does not come as announced is an error naming it.
  lazy[0].fetch = [] { return at::zeros({3, 4}); };
  try {
    write_safetensors(dir / "wrong.safetensors", lazy);
    FAIL() << "a tensor of another shape was written";
  } catch (const Error& e) {
    EXPECT_EQ(e.field("tensor"), "w");
    EXPECT_EQ(e.field("value"), "Float [3, 4]");
    EXPECT_EQ(e.field("expected"), "Float [4, 3]");
  }
}

TEST(Safetensors, MalformedFilesAreDataErrorsNamingTheFile) {
  const std::string good = encode_safetensors({{"w", at::ones({4})}});
  std::string huge_length = good;
  huge_length[7] = 0x7f;
  std::string short_data = good.substr(0, good.size() - 1);
  std::string bad_json = good;
  bad_json[9] = '!';
  std::string bad_dtype = good;
  bad_dtype.replace(bad_dtype.find("F32"), 3, "Q99");
  for (const auto& [what, bytes] :
       std::vector<std::pair<std::string, std::string>>{{"too short", "abc"},
                                                        {"header length", huge_length},
                                                        {"data_offsets", short_data},
                                                        {"not valid JSON", bad_json},
                                                        {"unknown dtype", bad_dtype}}) {
    try {
      decode_safetensors(bytes, "ckpt.safetensors");
      ADD_FAILURE() << what << " accepted";
    } catch (const DataError& e) {
      EXPECT_NE(std::string(e.what()).find("ckpt.safetensors"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace loom::train
