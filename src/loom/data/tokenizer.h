// A subword tokenizer for language models: a SentencePiece model (Debian's libsentencepiece, used
// through libloom_sentencepiece.so: see data/sentencepiece_module.h for why), trained here with
// byte-pair encoding on a corpus, or loaded from a `.model` file that SentencePiece's own tools
// wrote; or Hugging Face's tokenizer.json of a byte-level BPE (GPT-2, Llama 3:
// data/byte_level_bpe.h). Token ids are the model's; its fingerprint, a hash of the
// serialized model, is written into every token shard made with it, so that shards and the
// tokenizer that reads their text back can be checked to belong together.
//
// Threading: encode() and decode() may be called from several threads at once.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace loom::data {

class ByteLevelBpe;  // byte_level_bpe.h

struct TokenizerTraining {
  int vocab_size = 8000;
  // Characters the pieces must cover (SentencePiece's character_coverage); the rest map to the
  // unknown piece.
  double character_coverage = 1.0;
  int64_t max_sentences = 2000000;  // lines sampled for training, at most
  int threads = 1;
};

// The tokenizer a folder holds (a `loom data tokenize` output, a run, a Hugging Face model):
// its tokenizer.model, else its tokenizer.json; "" where it has neither.
std::string tokenizer_file_in(const std::string& dir);
// Copies the tokenizer `from_dir` holds (its tokenizer_file_in, and a tokenizer.json's
// tokenizer_config.json) into `to_dir`, atomically, as bytes: nothing is loaded.
void copy_tokenizer(const std::string& from_dir, const std::string& to_dir);

class Tokenizer {
 public:
  // A SentencePiece model, or a tokenizer.json (a path ending in .json; the tokenizer_config.json
  // beside it, where there is one, names the end-of-text token). Throws DataError naming the path
  // when it is missing or not a tokenizer, ConfigError naming the key of a tokenizer.json that
  // asks for what Loom does not do. Every method of a SentencePiece tokenizer throws Error when
  // the SentencePiece module cannot be loaded (saying where it looked).
  static Tokenizer load(const std::string& path);
  // A BPE model trained on the lines `next_line` gives until it returns nullopt. Throws
  // ConfigError for a vocabulary the text cannot fill (naming --vocab-size), DataError for text
  // without a line that is not blank.
  static Tokenizer train(const std::function<std::optional<std::string>()>& next_line,
                         const TokenizerTraining& options);

  int vocab_size() const;
  int eos_id() const;  // ends each document in token shards
  std::vector<int32_t> encode(std::string_view text) const;
  std::string decode(const std::vector<int32_t>& ids) const;
  // FNV-1a 64 of the serialized model.
  uint64_t fingerprint() const { return fingerprint_; }
  // What save() names the file in a folder: tokenizer.model, or tokenizer.json.
  std::string file_name() const { return bpe_ ? "tokenizer.json" : "tokenizer.model"; }
  // Writes the model into `dir` as file_name() (a `.model` file is readable by SentencePiece's
  // tools; a tokenizer.json gets a tokenizer_config.json naming its end-of-text token beside it),
  // atomically; returns the path.
  std::string save_in(const std::string& dir) const;

 private:
  explicit Tokenizer(std::string serialized, const std::string& origin);
  Tokenizer(std::shared_ptr<const ByteLevelBpe> bpe, std::string serialized);

  struct Model;                              // the module's loaded model (tokenizer.cpp)
  std::shared_ptr<Model> model_;             // shared by copies; null for a tokenizer.json
  std::shared_ptr<const ByteLevelBpe> bpe_;  // a tokenizer.json's
  std::string serialized_;
  uint64_t fingerprint_ = 0;
};

// "9f86d081884c7d65"
std::string fingerprint_hex(uint64_t fingerprint);

}  // namespace loom::data
