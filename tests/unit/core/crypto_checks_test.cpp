// CRC-32C and HMAC-SHA256 against published test vectors.
#include <gtest/gtest.h>

#include <string>

#include "loom/core/crc32c.h"
#include "loom/core/error.h"
#include "loom/core/keyed_hash.h"
#include "tools/test_support.h"

namespace loom {
namespace {

std::string hex(const std::string& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

TEST(Crc32c, MatchesTheCheckValue) {
  const std::string text = "123456789";
  EXPECT_EQ(crc32c(text.data(), text.size()), 0xE3069283u);  // the standard check value
  EXPECT_EQ(crc32c(nullptr, 0), 0u);
}

TEST(Crc32c, ContinuesAcrossPiecesOfAnyLength) {
  std::string data(1000, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7 + 3);
  const uint32_t whole = crc32c(data.data(), data.size());
  for (size_t cut : {0, 1, 7, 8, 9, 500, 999}) {
    const uint32_t first = crc32c(data.data(), cut);
    EXPECT_EQ(crc32c(data.data() + cut, data.size() - cut, first), whole) << "cut at " << cut;
  }
  data[500] ^= 1;
  EXPECT_NE(crc32c(data.data(), data.size()), whole);
}

TEST(KeyedHash, MatchesRfc4231) {
  // RFC 4231, test case 2.
  EXPECT_EQ(hex(hmac_sha256("Jefe", "what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

TEST(KeyedHash, RandomBytesDifferAndCompareInConstantTime) {
  const std::string a = random_bytes(32), b = random_bytes(32);
  EXPECT_EQ(a.size(), 32u);
  EXPECT_NE(a, b);
  EXPECT_TRUE(equal_in_constant_time(a, a));
  EXPECT_FALSE(equal_in_constant_time(a, b));
  EXPECT_FALSE(equal_in_constant_time(a, a.substr(0, 31)));
}

TEST(KeyedHash, TokenFilesLoseTrailingWhitespaceAndMustNotBeEmpty) {
  test::TempDir dir;
  test::write_text(dir / "token", "s3cret\n");
  EXPECT_EQ(read_token_file(dir / "token", "--token-file"), "s3cret");
  test::write_text(dir / "empty", " \n");
  EXPECT_THROW(read_token_file(dir / "empty", "--token-file"), ConfigError);
  try {
    read_token_file(dir / "missing", "--token-file");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.key(), "--token-file");
    EXPECT_EQ(e.field("problem"), "unreadable");
  }
}

}  // namespace
}  // namespace loom
