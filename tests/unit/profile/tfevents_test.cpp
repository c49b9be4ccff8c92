#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "loom/profile/crc32c.h"
#include "loom/profile/tfevents_writer.h"
#include "tools/test_support.h"

namespace loom::profile {
namespace {

std::string hex(const std::string& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char b : bytes) {
    out += digits[b >> 4];
    out += digits[b & 15];
  }
  return out;
}

TEST(TfEvents, Crc32cOfAbcd) { EXPECT_EQ(crc32c("abcd", 4), 0x92c80a31u); }

// The record from ANCHORS.md, byte for byte.
TEST(TfEvents, ScalarRecordMatchesTheReferenceEncoding) {
  const std::string record = tf_record(scalar_event(1.7e9, 100, "loss", 0.5f));
  EXPECT_EQ(hex(record),
            "1a00000000000000"
            "129bd82d"
            "0900000040fc54d94110642a0d0a0b0a046c6f7373150000003f"
            "e52e08d6");
}

// TensorBoard's reader is not installed here: walk the framing and check both CRCs of every record.
TEST(TfEvents, WrittenFileIsFramedRecordsWithValidChecksums) {
  test::TempDir dir;
  std::string path;
  {
    TfEventsWriter writer(dir.path());
    writer.scalar("loss", 1, 2.5);
    writer.scalar("accuracy", 2, 0.75);
    path = writer.path();
  }
  EXPECT_NE(std::filesystem::path(path).filename().string().find("events.out.tfevents."),
            std::string::npos);
  const std::string bytes = test::read_text(path);
  size_t at = 0;
  int records = 0;
  while (at < bytes.size()) {
    ASSERT_LE(at + 12, bytes.size());
    uint64_t length = 0;
    std::memcpy(&length, bytes.data() + at, 8);
    uint32_t length_crc = 0, data_crc = 0;
    std::memcpy(&length_crc, bytes.data() + at + 8, 4);
    EXPECT_EQ(length_crc, masked_crc32c(bytes.data() + at, 8));
    ASSERT_LE(at + 12 + length + 4, bytes.size());
    std::memcpy(&data_crc, bytes.data() + at + 12 + length, 4);
    EXPECT_EQ(data_crc, masked_crc32c(bytes.data() + at + 12, length));
    if (records == 0) {
      EXPECT_NE(bytes.substr(at + 12, length).find("brain.Event:2"), std::string::npos);
    }
    at += 12 + length + 4;
    ++records;
  }
  EXPECT_EQ(records, 3);
  EXPECT_NE(bytes.find("accuracy"), std::string::npos);
}

}  // namespace
}  // namespace loom::profile
