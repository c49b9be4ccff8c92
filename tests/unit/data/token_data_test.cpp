// Token shards and the SentencePiece tokenizer: round trips, and shards that do not fit named
// with the file and what differs.
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>

#include "loom/core/error.h"
#include "loom/core/ignored_target.h"
#include "loom/data/text_corpus.h"
#include "loom/data/token_batch_source.h"
#include "loom/data/token_shard.h"
#include "loom/data/token_windows.h"
#include "loom/data/tokenizer.h"
#include "tools/test_support.h"

namespace loom::data {
namespace {

// The public-domain Jargon File that Debian's jargon-text ships (scripts/install-deps.sh).
const char* kJargon = "/usr/share/doc/jargon-text/jargon.txt.gz";

// SentencePiece is loaded with RTLD_DEEPBIND, which AddressSanitizer's runtime refuses.
#if defined(__SANITIZE_ADDRESS__)
#define SKIP_WITHOUT_SENTENCEPIECE() \
  GTEST_SKIP() << "SentencePiece needs RTLD_DEEPBIND, refused under ASan"
#else
#define SKIP_WITHOUT_SENTENCEPIECE()
#endif

// The DataError opening `path` raises (failing the test when it opens).
DataError open_error(const std::string& path, const TokenShard::Expect& expect = {}) {
  try {
    TokenShard::open(path, expect);
  } catch (const DataError& e) {
    return e;
  }
  ADD_FAILURE() << path << " opened";
  return DataError("");
}

// What is wrong with the shard at `path`, as the error's fields say: "problem value/expected".
std::string shard_problem(const std::string& path, const TokenShard::Expect& expect = {}) {
  const DataError e = open_error(path, expect);
  EXPECT_EQ(e.field("path"), path);
  return e.field("problem") + " " + e.field("value") + "/" + e.field("expected");
}

void overwrite(const std::string& path, size_t offset, const std::string& bytes) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

TEST(TokenShard, RoundTripsInTheNarrowestWidth) {
  test::TempDir dir;
  const std::vector<int32_t> small = {0, 7, 65535, 2, 40000};
  write_token_shard(dir / "a.tokens", small, 65536, 0xfeedULL);
  const TokenShard a = TokenShard::open(dir / "a.tokens", {65536, 0xfeedULL});
  EXPECT_EQ(a.info().token_bytes, 2);
  EXPECT_EQ(std::filesystem::file_size(dir / "a.tokens"), 64u + 5 * 2);
  ASSERT_EQ(a.size(), 5);
  std::vector<int64_t> back(5);
  a.read(0, 5, back.data());
  EXPECT_EQ(back, (std::vector<int64_t>{0, 7, 65535, 2, 40000}));

  const std::vector<int32_t> large = {70000, 1, 100276};
  write_token_shard(dir / "b.tokens", large, 100277, 1);
  const TokenShard b = TokenShard::open(dir / "b.tokens");
  EXPECT_EQ(b.info().token_bytes, 4);
  EXPECT_EQ(b.at(2), 100276);
  EXPECT_THROW(b.read(2, 2, back.data()), DataError);                          // past the end
  EXPECT_THROW(write_token_shard(dir / "c.tokens", {5, 9}, 8, 1), DataError);  // 9 >= 8
}

// A shard of fine-tuning pairs carries a loss mask: a byte a token after the ids (version 2).
// A shard without one counts every token.
TEST(TokenShard, CarriesALossMaskWhereGiven) {
  test::TempDir dir;
  const std::vector<int32_t> tokens = {5, 6, 7, 8, 9};
  const std::vector<uint8_t> counted = {0, 0, 1, 1, 1};
  write_token_shard(dir / "m.tokens", tokens, 100, 3, &counted);
  const TokenShard masked = TokenShard::open(dir / "m.tokens", {100, 3});
  EXPECT_EQ(masked.info().version, kMaskedTokenShardVersion);
  EXPECT_TRUE(masked.info().loss_mask);
  EXPECT_EQ(std::filesystem::file_size(dir / "m.tokens"), 64u + 5 * (2 + 1));
  std::vector<uint8_t> back(4);
  masked.read_counted(1, 4, back.data());
  EXPECT_EQ(back, (std::vector<uint8_t>{0, 1, 1, 1}));
  std::vector<int64_t> ids(5);
  masked.read(0, 5, ids.data());
  EXPECT_EQ(ids, (std::vector<int64_t>{5, 6, 7, 8, 9}));

  write_token_shard(dir / "plain.tokens", tokens, 100, 3);
  const TokenShard plain = TokenShard::open(dir / "plain.tokens");
  EXPECT_FALSE(plain.info().loss_mask);
  plain.read_counted(0, 4, back.data());
  EXPECT_EQ(back, (std::vector<uint8_t>{1, 1, 1, 1}));
  const std::vector<uint8_t> short_mask = {1};
  EXPECT_THROW(write_token_shard(dir / "x.tokens", tokens, 100, 3, &short_mask), Error);
  // A mask cut off is a length the header does not account for.
  std::filesystem::resize_file(dir / "m.tokens", 64 + 5 * 2 + 2);
  EXPECT_EQ(shard_problem(dir / "m.tokens"), "length 76/79");
}

// Batches of masked windows: the inputs are the tokens, prompts included; a target whose token
// does not count is kIgnoredTarget, the others are the next tokens.
TEST(TokenBatchSource, TargetsThatDoNotCountAreIgnored) {
  test::TempDir dir;
  std::vector<int32_t> tokens;
  std::vector<uint8_t> counted;
  for (int32_t t = 0; t < 64; ++t) {
    tokens.push_back(t);
    counted.push_back(t % 4 == 0 ? 0 : 1);  // every fourth token a prompt's
  }
  const std::string path = dir / "train-00000.tokens";
  write_token_shard(path, tokens, 100, 1, &counted);
  auto windows = std::make_shared<const TokenWindows>(
      std::vector<TokenShard>{TokenShard::open(path)}, 8, /*seed=*/5);
  ASSERT_TRUE(windows->loss_masked());
  const TokenBatchSource source(windows, 2);
  const Batch batch = source.batch(0, 0);
  ASSERT_EQ(batch.targets.sizes(), (std::vector<int64_t>{2, 8}));
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t t = 0; t < 8; ++t) {
      const int64_t input = batch.inputs[b][t].item<int64_t>();
      const int64_t expected = (input + 1) % 4 == 0 ? kIgnoredTarget : input + 1;
      EXPECT_EQ(batch.targets[b][t].item<int64_t>(), expected) << "window " << b << ", " << t;
    }
  }
}

// A hand-written tokenizer.json of a byte-level BPE: GPT-2's pre-tokenizer splits " ab" from
// "ab"; merges apply lowest rank first (" ab" is "Ġa" + "b", not "Ġ" + "ab"); the added token is
// found inside text; a space is "Ġ".
// What Loom does not do (a normalizer) is refused naming the key.
TEST(Tokenizer, ReadsAByteLevelBpeTokenizerJson) {
  test::TempDir dir;
  nlohmann::json file = {
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"added_tokens", nlohmann::json::array({nlohmann::json{
                           {"id", 6}, {"content", "<|endoftext|>"}, {"special", true}}})},
      {"model",
       {{"type", "BPE"},
        {"vocab", {{"a", 0}, {"b", 1}, {"\u0120", 2}, {"ab", 3}, {"\u0120a", 4}, {"\u0120ab", 5}}},
        {"merges", {"\u0120 a", "a b", "\u0120a b"}}}}};
  std::ofstream(dir / "tokenizer.json") << file.dump();
  const Tokenizer t = Tokenizer::load(dir / "tokenizer.json");
  EXPECT_EQ(t.vocab_size(), 7);
  EXPECT_EQ(t.eos_id(), 6);  // <|endoftext|>, with no tokenizer_config.json to say otherwise
  EXPECT_EQ(t.encode("ab ab<|endoftext|>ba"), (std::vector<int32_t>{3, 5, 6, 1, 0}));
  EXPECT_EQ(t.decode({3, 5, 6, 1, 0}), "ab ab<|endoftext|>ba");
  EXPECT_EQ(t.file_name(), "tokenizer.json");

  file["normalizer"] = {{"type", "NFC"}};
  std::ofstream(dir / "nfc.json") << file.dump();
  try {
    Tokenizer::load(dir / "nfc.json");
    ADD_FAILURE() << "a normalizer was taken";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.field("key"), "normalizer");
  }
}

TEST(TokenShard, ABadShardIsNamedWithWhatDiffers) {
  test::TempDir dir;
  const std::string path = dir / "s.tokens";
  const auto fresh = [&] { write_token_shard(path, {1, 2, 3, 4}, 1000, 0xabcULL); };
  fresh();
  EXPECT_EQ(shard_problem(path, {2000, std::nullopt}), "vocab_size 1000/2000");
  EXPECT_EQ(shard_problem(path, {std::nullopt, 0xdefULL}),
            "tokenizer 0000000000000abc/0000000000000def");
  std::filesystem::resize_file(path, 64 + 3 * 2);  // a token short
  EXPECT_EQ(shard_problem(path), "length 70/72");
  EXPECT_EQ(open_error(path).field("tokens"), "4");  // what the header says
  fresh();
  overwrite(path, 0, "LOOMTOKX");
  EXPECT_EQ(shard_problem(path), "magic /");
  fresh();
  overwrite(path, 8, std::string("\x03\0\0\0", 4));
  EXPECT_EQ(shard_problem(path), "version 3/1 or 2");
  fresh();
  overwrite(path, 8, std::string("\x02\0\0\0", 4));  // a loss mask its size lacks
  EXPECT_EQ(shard_problem(path), "length 72/76");
  fresh();
  overwrite(path, 12, std::string("\x03\0\0\0", 4));
  EXPECT_EQ(shard_problem(path), "token_bytes 3/2 or 4");
  std::filesystem::resize_file(path, 10);
  EXPECT_EQ(shard_problem(path), "short 10/64");
  EXPECT_EQ(shard_problem(dir / "missing.tokens"), "unopenable /");
}

TEST(TokenShard, AnIdOutsideTheVocabularyIsADataErrorNamingTheShardTheIdAndTheVocabulary) {
  test::TempDir dir;
  const std::string narrow = dir / "narrow.tokens";
  write_token_shard(narrow, {1, 2, 3, 4, 999}, 1000, 7);
  EXPECT_EQ(TokenShard::open(narrow).max_token(), 999);
  overwrite(narrow, 64 + 2 * 2, std::string("\xff\xff", 2));  // token 2: 0xFFFF
  overwrite(narrow, 64 + 3 * 2, std::string("\xe8\x03", 2));  // token 3: 1000, just past
  const DataError e = open_error(narrow, {1000, 7});
  EXPECT_EQ(e.field("path"), narrow);
  EXPECT_EQ(e.field("token_id"), "65535");  // the largest
  EXPECT_EQ(e.field("vocab_size"), "1000");
  EXPECT_EQ(e.field("position"), "2");  // the first outside
  EXPECT_NE(std::string(e.what()).find(narrow), std::string::npos) << e.what();

  // Four bytes a token: the id one past the last.
  const std::string wide = dir / "wide.tokens";
  write_token_shard(wide, {70000, 1, 100276}, 100277, 1);
  EXPECT_EQ(TokenShard::open(wide).max_token(), 100276);
  overwrite(wide, 64 + 1 * 4, std::string("\xb5\x87\x01\x00", 4));  // 100277
  const DataError w = open_error(wide);
  EXPECT_EQ(w.field("token_id"), "100277");
  EXPECT_EQ(w.field("vocab_size"), "100277");
  EXPECT_EQ(w.field("position"), "1");

  // An empty shard has no largest id and nothing to refuse.
  write_token_shard(dir / "empty.tokens", {}, 1000, 7);
  EXPECT_EQ(TokenShard::open(dir / "empty.tokens").max_token(), -1);
}

TEST(TokenWindows, ShardsOfDifferentVocabulariesAreRefusedNamingTheShard) {
  test::TempDir dir;
  write_token_shard(dir / "a.tokens", std::vector<int32_t>(40, 5), 1000, 1);
  write_token_shard(dir / "b.tokens", std::vector<int32_t>(40, 1500), 2000, 1);
  try {
    TokenWindows({TokenShard::open(dir / "a.tokens"), TokenShard::open(dir / "b.tokens")}, 8, 1);
    FAIL() << "a model of 1000 ids was given ids up to 1500";
  } catch (const DataError& e) {
    EXPECT_EQ(e.field("path"), dir / "b.tokens");
    EXPECT_EQ(e.field("vocab_size"), "2000");
    EXPECT_EQ(e.field("expected"), "1000");
  }
}

TEST(TextCorpus, ReadsParagraphsAcrossFilesPlainAndCompressed) {
  test::TempDir dir;
  std::ofstream(dir / "a.txt") << "first line\nof one paragraph\n\n\nsecond\r\n";
  std::ofstream(dir / "b.txt") << "third, without a final line break";  // no blank line between
  TextCorpus corpus({dir / "a.txt", dir / "b.txt"});
  EXPECT_EQ(corpus.next_paragraph(), "first line of one paragraph");
  EXPECT_EQ(corpus.next_paragraph(), "second");
  EXPECT_EQ(corpus.next_paragraph(), "third, without a final line break");
  EXPECT_EQ(corpus.next_paragraph(), std::nullopt);
  EXPECT_THROW(TextCorpus({dir / "nope.txt"}), DataError);

  // A compressed file cut short is an error naming it, not a shorter corpus.
  std::string text;
  for (int i = 0; i < 2000; ++i) text += "line " + std::to_string(i) + " of a long file\n";
  gzFile gz = gzopen((dir / "long.txt.gz").c_str(), "wb");
  gzwrite(gz, text.data(), static_cast<unsigned>(text.size()));
  gzclose(gz);
  std::filesystem::resize_file(dir / "long.txt.gz",
                               std::filesystem::file_size(dir / "long.txt.gz") / 2);
  TextCorpus cut({dir / "long.txt.gz"});
  try {
    while (cut.next_line()) {
    }
    FAIL() << "a truncated gzip file read to its end";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("corpus '" + (dir / "long.txt.gz") + "'"),
              std::string::npos)
        << e.what();
  }
}

// The first `lines` lines of the Jargon File.
std::function<std::optional<std::string>()> jargon_lines(TextCorpus& corpus, int lines) {
  return [&corpus, left = lines]() mutable -> std::optional<std::string> {
    if (left-- <= 0) return std::nullopt;
    return corpus.next_line();
  };
}

// Tokenizer::train's source of `lines`, one a call.
std::function<std::optional<std::string>()> lines_of(std::vector<std::string> lines) {
  return [lines = std::move(lines), next = size_t{0}]() mutable -> std::optional<std::string> {
    if (next >= lines.size()) return std::nullopt;
    return lines[next++];
  };
}

TEST(Tokenizer, TrainsBpeOnRealTextAndRoundTrips) {
  SKIP_WITHOUT_SENTENCEPIECE();
  if (!std::filesystem::exists(kJargon)) GTEST_SKIP() << kJargon << " missing (jargon-text)";
  TextCorpus corpus({kJargon});
  TokenizerTraining options;
  options.vocab_size = 300;
  const Tokenizer t = Tokenizer::train(jargon_lines(corpus, 4000), options);
  EXPECT_EQ(t.vocab_size(), 300);
  EXPECT_EQ(t.eos_id(), 2);
  const std::string text = "The hacker ethic: information wants to be free.";
  const std::vector<int32_t> ids = t.encode(text);
  EXPECT_GT(ids.size(), 5u);
  EXPECT_LT(ids.size(), text.size());  // pieces longer than a character
  EXPECT_EQ(t.decode(ids), text);

  // Saved and loaded, the same model: the same fingerprint and ids.
  test::TempDir dir;
  EXPECT_EQ(t.save_in(dir.path()), dir / "tokenizer.model");
  const Tokenizer loaded = Tokenizer::load(dir / "tokenizer.model");
  EXPECT_EQ(loaded.fingerprint(), t.fingerprint());
  EXPECT_EQ(loaded.encode(text), ids);
  EXPECT_EQ(fingerprint_hex(t.fingerprint()).size(), 16u);
  std::ofstream(dir / "junk.model") << "not a model";
  EXPECT_THROW(Tokenizer::load(dir / "junk.model"), DataError);
  EXPECT_THROW(Tokenizer::load(dir / "missing.model"), DataError);
}

TEST(Tokenizer, AVocabularyTheTextCannotFillNamesTheOption) {
  SKIP_WITHOUT_SENTENCEPIECE();
  TokenizerTraining options;
  options.vocab_size = 5000;
  try {
    Tokenizer::train(lines_of({"a tiny corpus", "of two lines"}), options);
    FAIL() << "trained 5000 pieces on two lines";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("--vocab-size"), std::string::npos) << e.what();
  }
}

TEST(Tokenizer, TextOfBlankLinesIsRefusedBeforeSentencePieceSeesIt) {
  SKIP_WITHOUT_SENTENCEPIECE();
  TokenizerTraining options;
  options.vocab_size = 100;
  for (const std::vector<std::string>& lines :
       {std::vector<std::string>{}, std::vector<std::string>{"", "   ", "\t", " \r"}}) {
    try {
      Tokenizer::train(lines_of(lines), options);
      FAIL() << "trained on " << lines.size() << " blank lines";
    } catch (const DataError& e) {
      // Said before SentencePiece's own internal check speaks, which names its source file.
      EXPECT_EQ(std::string(e.what()).find("trainer_interface"), std::string::npos) << e.what();
    }
  }
}

// Two shards whose token at position p is 1000 x shard + p (mod the vocabulary), so a window's
// first token says where it came from.
std::vector<TokenShard> numbered_shards(const test::TempDir& dir, std::vector<int64_t> sizes) {
  std::vector<TokenShard> shards;
  for (size_t s = 0; s < sizes.size(); ++s) {
    std::vector<int32_t> tokens;
    for (int64_t p = 0; p < sizes[s]; ++p) tokens.push_back(static_cast<int32_t>(1000 * s + p));
    const std::string path = dir / ("train-0000" + std::to_string(s) + ".tokens");
    write_token_shard(path, tokens, 60000, 42);
    shards.push_back(TokenShard::open(path));
  }
  return shards;
}

TEST(TokenWindows, AreAPureFunctionOfSeedEpochAndIndexAndShareOutOverRanks) {
  test::TempDir dir;
  const auto shards = numbered_shards(dir, {100, 57});
  // seq_len 8: (100 - 8) / 8 = 11 and (57 - 8) / 8 = 6 windows, whatever the epoch's offset.
  const TokenWindows all(shards, 8, 5);
  ASSERT_EQ(all.total_windows(), 17);
  ASSERT_EQ(all.size(), 17);
  std::set<int64_t> starts[2];
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    const at::Tensor batch = all.batch(epoch, 0, 17);
    for (int64_t w = 0; w < 17; ++w) {
      const at::Tensor row = batch[w];
      const int64_t first = row[0].item<int64_t>();
      // Nine consecutive tokens of one shard, inside it.
      EXPECT_TRUE(at::equal(row, at::arange(first, first + 9, at::kLong))) << row;
      EXPECT_LE(first % 1000 + 9, first < 1000 ? 100 : 57);
      starts[epoch].insert(first);
    }
    EXPECT_EQ(starts[epoch].size(), 17u);  // every window once
  }
  EXPECT_NE(starts[0], starts[1]);  // each epoch cuts the text elsewhere
  // and visits the windows in an order of its own, not the shards' order.
  std::vector<int64_t> order;
  for (int64_t w = 0; w < 17; ++w) order.push_back(all.batch(0, 0, 17)[w][0].item<int64_t>());
  EXPECT_FALSE(std::is_sorted(order.begin(), order.end()));
  // The same arguments, the same windows: a second reader, any batch size.
  const TokenWindows again(numbered_shards(dir, {100, 57}), 8, 5);
  EXPECT_TRUE(at::equal(again.batch(1, 2, 4), all.batch(1, 0, 17).narrow(0, 8, 4)));
  EXPECT_FALSE(at::equal(TokenWindows(shards, 8, 6).batch(0, 0, 17), all.batch(0, 0, 17)));

  // Two ranks take disjoint shares of 8 windows each (the 17th is dropped for both).
  std::set<int64_t> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    const TokenWindows share(shards, 8, 5, rank, 2);
    ASSERT_EQ(share.size(), 8);
    const at::Tensor b = share.batch(0, 0, 8);
    for (int64_t w = 0; w < 8; ++w) ranks.insert(b[w][0].item<int64_t>());
  }
  EXPECT_EQ(ranks.size(), 16u);
  for (int64_t first : ranks) EXPECT_TRUE(starts[0].count(first)) << first;
  EXPECT_THROW(all.batch(0, 1, 17), DataError);                              // past the epoch
  EXPECT_THROW(TokenWindows(numbered_shards(dir, {8}), 8, 5), ConfigError);  // no window fits
}

TEST(TokenWindows, OpenChecksTheShardsAgainstTheFoldersTokenizer) {
  SKIP_WITHOUT_SENTENCEPIECE();
  if (!std::filesystem::exists(kJargon)) GTEST_SKIP() << kJargon << " missing (jargon-text)";
  test::TempDir dir;
  TextCorpus corpus({kJargon});
  TokenizerTraining options;
  options.vocab_size = 300;
  const Tokenizer t = Tokenizer::train(jargon_lines(corpus, 2000), options);
  t.save_in(dir.path());
  std::vector<int32_t> tokens = t.encode("The Jargon File is a glossary of hacker slang.");
  while (tokens.size() < 200) {
    const std::vector<int32_t> copy = tokens;
    tokens.insert(tokens.end(), copy.begin(), copy.end());
  }
  write_token_shard(dir / "train-00000.tokens", tokens, t.vocab_size(), t.fingerprint());
  const TokenWindows windows = TokenWindows::open(dir.path(), "train", 16, 1);
  EXPECT_EQ(windows.vocab_size(), 300);
  EXPECT_EQ(windows.tokens(), static_cast<int64_t>(tokens.size()));
  try {
    TokenWindows::open(dir.path(), "val", 16, 1);
    FAIL() << "no val shards";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("no val-NNNNN.tokens shards"), std::string::npos);
  }
  // A shard of another tokenizer is named.
  write_token_shard(dir / "train-00001.tokens", tokens, t.vocab_size(), t.fingerprint() + 1);
  try {
    TokenWindows::open(dir.path(), "train", 16, 1);
    FAIL() << "a shard of another tokenizer was taken";
  } catch (const DataError& e) {
    EXPECT_EQ(e.field("path"), dir / "train-00001.tokens");
    EXPECT_EQ(e.field("problem"), "tokenizer");
  }
  // A folder that is not there is named as missing, not as one without a tokenizer.
  try {
    TokenWindows::open(dir / "absent", "train", 16, 1);
    FAIL() << "a missing folder was opened";
  } catch (const DataError& e) {
    EXPECT_EQ(e.field("path"), dir / "absent");
    EXPECT_EQ(e.field("problem"), "missing");
  }
}

}  // namespace
}  // namespace loom::data
