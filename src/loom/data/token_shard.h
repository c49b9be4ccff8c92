// Token shards: the text a language model trains on, as token ids after a versioned header,
// read memory-mapped. `loom data tokenize` writes them; the layout, little-endian:
//
//   bytes  0-7   magic "LOOMTOKS"
//          8-11  format version: 1, or 2 with a loss mask after the tokens
//         12-15  bytes per token: 2 (uint16) or 4 (uint32)
//         16-23  vocabulary size of the tokenizer
//         24-31  token count
//         32-39  the tokenizer's fingerprint (data/tokenizer.h)
//         40-63  zero
//         64-    the tokens
//          then  version 2 only: the loss mask, one byte per token, 1 where the token counts as
//                a target (a response token of a fine-tuning pair, and its end-of-text), 0
//                where it does not (a prompt token): its position's target is then
//                kIgnoredTarget (core/ignored_target.h)
//
// A shard whose header, size or tokenizer does not match what is expected is refused with the
// file and what differs: nothing trains on tokens of another tokenizer by mistake. Nor on an id
// the vocabulary lacks: opening a shard reads every token once for the largest id, which must be
// below the vocabulary (an embedding would otherwise fail far from the file, naming nothing).
//
// Threading: a TokenShard is read-only once open; any thread may read it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace loom {
class MappedFile;  // loom/core/mapped_file.h: internal, as only the shard's source reads it
}  // namespace loom

namespace loom::data {

constexpr int kTokenShardVersion = 1;
constexpr int kMaskedTokenShardVersion = 2;
constexpr int64_t kTokenShardHeaderBytes = 64;

struct TokenShardInfo {
  int version = kTokenShardVersion;
  int token_bytes = 2;  // 2 when the vocabulary fits in uint16, else 4
  int64_t vocab_size = 0;
  int64_t tokens = 0;
  uint64_t fingerprint = 0;
  bool loss_mask = false;  // version 2: a byte per token says whether it counts as a target
};

// Bytes per token for a vocabulary: uint16 up to 65,536 ids, else uint32.
int token_bytes_for(int64_t vocab_size);

// Writes `tokens` (each below `vocab_size`) as a shard at `path`, atomically (a crash leaves no
// half shard), with `counted` as its loss mask where given (one flag a token: version 2).
// Throws DataError naming the path and the first token out of range.
void write_token_shard(const std::string& path, const std::vector<int32_t>& tokens,
                       int64_t vocab_size, uint64_t fingerprint,
                       const std::vector<uint8_t>* counted = nullptr);

class TokenShard {
 public:
  // What the opener expects of the header; unset fields are not checked.
  struct Expect {
    std::optional<int64_t> vocab_size;
    std::optional<uint64_t> fingerprint;
  };
  // Maps `path` and checks its header and size. Throws DataError naming the file and what
  // differs: magic, version, bytes per token, size for the token count, vocabulary size,
  // tokenizer fingerprint; or a token id at or past the vocabulary, with the fields "path",
  // "token_id" (the largest such id), "vocab_size" and "position" (where it first appears).
  static TokenShard open(const std::string& path, const Expect& expect = {});

  const std::string& path() const { return path_; }
  const TokenShardInfo& info() const { return info_; }
  int64_t size() const { return info_.tokens; }
  int64_t max_token() const { return max_token_; }  // the largest id; -1 for an empty shard
  int64_t at(int64_t index) const;
  // Tokens [begin, begin + count) as int64 (what embeddings and losses take).
  void read(int64_t begin, int64_t count, int64_t* out) const;
  // Whether tokens [begin, begin + count) count as targets: 1 or 0 each (all 1 without a mask).
  void read_counted(int64_t begin, int64_t count, uint8_t* out) const;

 private:
  void check_range(int64_t begin, int64_t count) const;  // throws DataError outside the shard

  std::string path_;
  TokenShardInfo info_;
  int64_t max_token_ = -1;
  std::shared_ptr<const MappedFile> mapping_;  // shared by copies, unmapped with the last
};

}  // namespace loom::data
