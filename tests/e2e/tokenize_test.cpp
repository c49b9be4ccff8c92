// `loom data tokenize` on the Jargon File (Debian's jargon-text): a trained tokenizer and token
// shards whose counts add up, the same shards again from the saved tokenizer, and bad input
// named.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "e2e/json_output.h"
#include "loom/data/text_corpus.h"
#include "loom/data/token_shard.h"
#include "loom/data/tokenizer.h"
#include "tools/test_support.h"

namespace loom {
namespace {

const char* kJargon = "/usr/share/doc/jargon-text/jargon.txt.gz";

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

std::vector<std::string> words(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

TEST(Tokenize, TheJargonFileBecomesShardsOfATrainedTokenizer) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "SentencePiece needs RTLD_DEEPBIND, refused under AddressSanitizer";
#endif
  if (!std::filesystem::exists(kJargon)) GTEST_SKIP() << kJargon << " missing (jargon-text)";
  test::TempDir dir;
  const auto r = test::run_loom("data tokenize " + std::string(kJargon) + " --out " +
                                (dir / "tok") + " --vocab-size 1000 --val-fraction 0.1 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto out = test::json_line(r.output);
  EXPECT_EQ(out["vocab_size"], 1000);
  EXPECT_EQ(out["trained"], true);
  const int64_t paragraphs = out["paragraphs"];
  EXPECT_GT(paragraphs, 10000);  // the Jargon File's entries
  EXPECT_EQ(out["val_paragraphs"], static_cast<int64_t>(std::ceil(0.1 * paragraphs)));

  // The shards hold what the report counts, each a paragraph's tokens and an end-of-text id.
  const data::Tokenizer tokenizer = data::Tokenizer::load(dir / "tok/tokenizer.model");
  EXPECT_EQ(data::fingerprint_hex(tokenizer.fingerprint()), out["fingerprint"]);
  const data::TokenShard::Expect expect{1000, tokenizer.fingerprint()};
  int64_t train = 0, val = 0, ends = 0;
  for (const std::string path : out["train_shards"])
    train += data::TokenShard::open(path, expect).size();
  for (const std::string path : out["val_shards"]) {
    const data::TokenShard shard = data::TokenShard::open(path, expect);
    val += shard.size();
    for (int64_t i = 0; i < shard.size(); ++i) ends += shard.at(i) == tokenizer.eos_id();
  }
  EXPECT_EQ(train, out["train_tokens"].get<int64_t>());
  EXPECT_EQ(val, out["val_tokens"].get<int64_t>());
  EXPECT_EQ(ends, out["val_paragraphs"].get<int64_t>());
  EXPECT_GT(train, 300000);

  // The first paragraph decodes back to its words.
  const data::TokenShard first = data::TokenShard::open(out["train_shards"][0].get<std::string>());
  std::vector<int32_t> ids;
  for (int64_t i = 0; first.at(i) != tokenizer.eos_id(); ++i) {
    ids.push_back(static_cast<int32_t>(first.at(i)));
  }
  data::TextCorpus corpus({kJargon});
  EXPECT_EQ(words(tokenizer.decode(ids)), words(*corpus.next_paragraph()));

  // The saved tokenizer gives the same shards, byte for byte.
  const auto again = test::run_loom("data tokenize " + std::string(kJargon) + " --out " +
                                    (dir / "again") + " --tokenizer " +
                                    (dir / "tok/tokenizer.model") + " --val-fraction 0.1 --json");
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_EQ(test::json_line(again.output)["trained"], false);
  EXPECT_EQ(file_bytes(dir / "again/train-00000.tokens"),
            file_bytes(dir / "tok/train-00000.tokens"));
  EXPECT_EQ(file_bytes(dir / "again/val-00000.tokens"), file_bytes(dir / "tok/val-00000.tokens"));
  // A model folder that holds it (a Hugging Face folder's tokenizer.model) gives them too. A
  // tokenizer.json of a kind Loom does not read (WordPiece) is refused naming its key, a folder
  // with no tokenizer naming --tokenizer (tests/python/test_tokens.py reads those it does).
  const auto folder =
      test::run_loom("data tokenize " + std::string(kJargon) + " --out " + (dir / "folder") +
                     " --tokenizer " + (dir / "tok") + " --val-fraction 0.1 --json");
  ASSERT_EQ(folder.exit_code, 0) << folder.output;
  EXPECT_EQ(file_bytes(dir / "folder/train-00000.tokens"),
            file_bytes(dir / "tok/train-00000.tokens"));
  std::filesystem::create_directories(dir / "hf");
  std::ofstream(dir / "hf/tokenizer.json")
      << R"({"pre_tokenizer": {"type": "ByteLevel"}, "model": {"type": "WordPiece"}})";
  const auto word_piece =
      test::run_loom_reporting("data tokenize " + std::string(kJargon) + " --out " +
                               (dir / "word_piece") + " --tokenizer " + (dir / "hf"));
  EXPECT_EQ(word_piece.result.exit_code, 2) << word_piece.result.output;
  EXPECT_EQ(word_piece.error["fields"]["problem"], "unsupported") << word_piece.error;
  EXPECT_EQ(word_piece.error["fields"]["key"], "model.type") << word_piece.error;
  std::filesystem::create_directories(dir / "empty");
  const auto none = test::run_loom_reporting("data tokenize " + std::string(kJargon) + " --out " +
                                             (dir / "none") + " --tokenizer " + (dir / "empty"));
  EXPECT_EQ(none.result.exit_code, 2) << none.result.output;
  EXPECT_EQ(none.error["fields"]["problem"], "no_tokenizer") << none.error;
  EXPECT_EQ(none.error["fields"]["key"], "--tokenizer") << none.error;
}

TEST(Tokenize, BadInputIsNamed) {
  test::TempDir dir;
  const auto missing =
      test::run_loom("data tokenize " + (dir / "nope.txt") + " --out " + (dir / "o"));
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.output.find("corpus '" + (dir / "nope.txt") + "': cannot be read"),
            std::string::npos)
      << missing.output;
  std::ofstream(dir / "a.txt") << "some text\n";
  const auto fraction = test::run_loom("data tokenize " + (dir / "a.txt") + " --out " +
                                       (dir / "o") + " --val-fraction 1.5");
  EXPECT_EQ(fraction.exit_code, 2);
  EXPECT_NE(fraction.output.find("--val-fraction"), std::string::npos) << fraction.output;
  const auto vocab = test::run_loom("data tokenize " + (dir / "a.txt") + " --out " + (dir / "o") +
                                    " --vocab-size 8");
  EXPECT_EQ(vocab.exit_code, 2);
  EXPECT_NE(vocab.output.find("--vocab-size"), std::string::npos) << vocab.output;
}

// A corpus without text is refused naming the file, before SentencePiece sees it (whose own
// message is an internal check naming its source file) and before the output folder is made.
TEST(Tokenize, ACorpusWithoutTextIsADataErrorNamingTheFile) {
  test::TempDir dir;
  std::ofstream(dir / "empty.txt").flush();
  std::ofstream(dir / "blank.txt") << "\n   \n\t\n\n";
  for (const char* name : {"empty.txt", "blank.txt"}) {
    SCOPED_TRACE(name);
    const auto r = test::run_loom_reporting("data tokenize " + (dir / name) + " --out " +
                                            (dir / "out") + " --vocab-size 100");
    EXPECT_EQ(r.result.exit_code, 1) << r.result.output;
    ASSERT_TRUE(r.error.is_object()) << r.result.output;
    EXPECT_EQ(r.error["kind"], "data");
    EXPECT_EQ(r.error["fields"]["path"], dir / name);
    EXPECT_FALSE(std::filesystem::exists(dir / "out"));
  }
}

}  // namespace
}  // namespace loom
