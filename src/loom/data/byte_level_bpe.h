// Hugging Face's `tokenizer.json` for the byte-level BPE tokenizers of GPT-2 and Llama 3,
// read natively: the file's own pieces (vocabulary, merges, added tokens, the pre-tokenizer's
// regular expression) run as the `tokenizers` library runs them, so that the ids equal
// transformers' (`encode(text, add_special_tokens=False)`; tests/python/test_hf_tokenizer.py
// checks it).
//
// Encoding a text:
//   1. Added tokens (<|endoftext|>, ...) found in the text are their own ids.
//   2. The rest is split by the pre-tokenizer's regular expression (PCRE2 with Unicode
//      properties: \p{L}, \p{N}, look-ahead), GPT-2's by default.
//   3. Each piece's bytes become printable characters (GPT-2's byte-to-character table).
//   4. The piece is merged by BPE, lowest merge rank first (leftmost among equals), and its
//      parts looked up in the vocabulary; with `ignore_merges` (Llama 3), a piece the vocabulary
//      holds whole is that id.
// What the file asks for beyond this (a normalizer, another model, byte fallback, subword
// prefixes) is refused with a ConfigError naming the key, rather than encoded differently.
//
// Threading: encode() and decode() may be called from several threads at once.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace loom::data {

class ByteLevelBpe {
 public:
  // From the text of a tokenizer.json; `origin` names it in errors. `eos_token`: the token that
  // ends a document (tokenizer_config.json's eos_token), or empty to take the first added
  // special token of the usual names (<|endoftext|>, <|end_of_text|>, </s>).
  static std::shared_ptr<const ByteLevelBpe> parse(const std::string& json,
                                                   const std::string& origin,
                                                   const std::string& eos_token);
  ~ByteLevelBpe();

  int vocab_size() const { return vocab_size_; }
  int eos_id() const { return eos_id_; }
  const std::string& eos_token() const { return eos_token_; }
  std::vector<int32_t> encode(std::string_view text) const;
  std::string decode(const std::vector<int32_t>& ids) const;

 private:
  ByteLevelBpe() = default;
  // A piece of text without added tokens: pre-tokenized, then each part by bpe().
  void encode_plain(std::string_view text, std::vector<int32_t>& out) const;
  // One pre-tokenized part, as byte-level characters.
  void bpe(const std::string& word, std::vector<int32_t>& out) const;

  std::unordered_map<std::string, int32_t> vocab_;
  std::vector<std::string> token_of_id_;  // byte-level text of each id ("" where none)
  std::vector<bool> added_;               // whether an id is an added token (decoded as is)
  // Merge ranks by the pair "left right" (a space cannot be in a byte-level token).
  std::unordered_map<std::string, int32_t> merge_rank_;
  std::vector<std::pair<std::string, int32_t>> added_tokens_;  // longest content first
  std::array<bool, 256> starts_added_{};  // the bytes some added token's content begins with
  bool ignore_merges_ = false;
  bool add_prefix_space_ = false;
  struct Pattern;  // the compiled pre-tokenizer expression (PCRE2)
  std::unique_ptr<Pattern> pattern_;
  int vocab_size_ = 0;
  int eos_id_ = -1;
  std::string eos_token_;
};

}  // namespace loom::data
