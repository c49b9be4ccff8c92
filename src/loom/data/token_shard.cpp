#include "loom/data/token_shard.h"

#include <cstring>
#include <string_view>

#include "loom/core/durable_file.h"
#include "loom/core/error.h"
#include "loom/core/mapped_file.h"
#include "loom/data/tokenizer.h"

namespace loom::data {
namespace {

constexpr char kMagic[8] = {'L', 'O', 'O', 'M', 'T', 'O', 'K', 'S'};

template <typename T>
void put(std::string& bytes, size_t offset, T value) {
  std::memcpy(bytes.data() + offset, &value, sizeof(T));  // the hosts Loom runs on are LE
}

template <typename T>
T get(const unsigned char* bytes, size_t offset) {
  T value;
  std::memcpy(&value, bytes + offset, sizeof(T));
  return value;
}

// The DataError for the shard at `path`: its fields name the path and the `problem` (unopenable,
// short, magic, version, token_bytes, vocab_size, length, tokenizer, token_id), with what was
// found and expected where they are numbers a program may read.
[[noreturn]] void refuse(const std::string& path, const std::string& problem,
                         const std::string& what, ErrorFields fields = {}) {
  fields["path"] = path;
  fields["problem"] = problem;
  throw DataError("token shard '" + path + "': " + what, std::move(fields));
}

// The largest of `count` ids of type T at `tokens` (-1 for none): a branch-free max over the
// ids' own type, which the compiler vectorises, so that opening a shard costs one read of it at
// memory speed. The tokens start 64 bytes into a page-aligned mapping: aligned for T.
template <typename T>
int64_t largest_id(const unsigned char* tokens, int64_t count) {
  const T* ids = reinterpret_cast<const T*>(tokens);
  T largest = 0;
  for (int64_t i = 0; i < count; ++i) largest = ids[i] > largest ? ids[i] : largest;
  return count == 0 ? -1 : static_cast<int64_t>(largest);
}

// Where the first id at or past `vocab_size` is (known to be there).
template <typename T>
int64_t first_outside(const unsigned char* tokens, int64_t count, int64_t vocab_size) {
  const T* ids = reinterpret_cast<const T*>(tokens);
  int64_t i = 0;
  while (i < count && static_cast<int64_t>(ids[i]) < vocab_size) ++i;
  return i;
}

}  // namespace

int token_bytes_for(int64_t vocab_size) { return vocab_size <= 65536 ? 2 : 4; }

void write_token_shard(const std::string& path, const std::vector<int32_t>& tokens,
                       int64_t vocab_size, uint64_t fingerprint,
                       const std::vector<uint8_t>* counted) {
  if (counted && counted->size() != tokens.size()) {
    throw Error("token shard '" + path + "': a loss mask of " + std::to_string(counted->size()) +
                " flags for " + std::to_string(tokens.size()) + " tokens");
  }
  const int width = token_bytes_for(vocab_size);
  const size_t body = tokens.size() * width + (counted ? tokens.size() : 0);
  std::string bytes(static_cast<size_t>(kTokenShardHeaderBytes) + body, '\0');
  std::memcpy(bytes.data(), kMagic, sizeof(kMagic));
  put<uint32_t>(bytes, 8, counted ? kMaskedTokenShardVersion : kTokenShardVersion);
  put<uint32_t>(bytes, 12, static_cast<uint32_t>(width));
  put<uint64_t>(bytes, 16, static_cast<uint64_t>(vocab_size));
  put<uint64_t>(bytes, 24, tokens.size());
  put<uint64_t>(bytes, 32, fingerprint);
  char* out = bytes.data() + kTokenShardHeaderBytes;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int32_t t = tokens[i];
    if (t < 0 || t >= vocab_size) {
      refuse(path, "token_id",
             "token " + std::to_string(i) + " is " + std::to_string(t) +
                 ", outside the vocabulary of " + std::to_string(vocab_size),
             {{"token_id", std::to_string(t)},
              {"vocab_size", std::to_string(vocab_size)},
              {"position", std::to_string(i)}});
    }
    if (width == 2) {
      const auto v = static_cast<uint16_t>(t);
      std::memcpy(out + i * 2, &v, 2);
    } else {
      const auto v = static_cast<uint32_t>(t);
      std::memcpy(out + i * 4, &v, 4);
    }
  }
  if (counted) {
    char* mask = out + tokens.size() * width;
    for (size_t i = 0; i < tokens.size(); ++i) mask[i] = (*counted)[i] ? 1 : 0;
  }
  replace_file_atomically(path, bytes);
}

TokenShard TokenShard::open(const std::string& path, const Expect& expect) {
  std::shared_ptr<const MappedFile> mapping = MappedFile::open(path);  // unopenable: its error
  const auto bytes = mapping->size();
  if (bytes < static_cast<size_t>(kTokenShardHeaderBytes)) {
    refuse(
        path, "short", std::to_string(bytes) + " bytes, shorter than the 64-byte header",
        {{"value", std::to_string(bytes)}, {"expected", std::to_string(kTokenShardHeaderBytes)}});
  }
  const unsigned char* h = mapping->data();

  if (std::memcmp(h, kMagic, sizeof(kMagic)) != 0) {
    refuse(path, "magic", "not a token shard (its first bytes are not LOOMTOKS)");
  }
  TokenShard shard;
  shard.path_ = path;
  TokenShardInfo& info = shard.info_;
  info.version = static_cast<int>(get<uint32_t>(h, 8));
  if (info.version != kTokenShardVersion && info.version != kMaskedTokenShardVersion) {
    refuse(
        path, "version",
        "format version " + std::to_string(info.version) + ", this Loom reads " +
            std::to_string(kTokenShardVersion) + " and " + std::to_string(kMaskedTokenShardVersion),
        {{"value", std::to_string(info.version)},
         {"expected",
          std::to_string(kTokenShardVersion) + " or " + std::to_string(kMaskedTokenShardVersion)}});
  }
  info.loss_mask = info.version == kMaskedTokenShardVersion;
  info.token_bytes = static_cast<int>(get<uint32_t>(h, 12));
  if (info.token_bytes != 2 && info.token_bytes != 4) {
    refuse(path, "token_bytes",
           std::to_string(info.token_bytes) + " bytes per token, expected 2 or 4",
           {{"value", std::to_string(info.token_bytes)}, {"expected", "2 or 4"}});
  }
  info.vocab_size = static_cast<int64_t>(get<uint64_t>(h, 16));
  if (info.vocab_size < 0) {
    refuse(path, "vocab_size",
           "a vocabulary of " + std::to_string(get<uint64_t>(h, 16)) + " ids: damaged",
           {{"value", std::to_string(get<uint64_t>(h, 16))}});
  }
  info.tokens = static_cast<int64_t>(get<uint64_t>(h, 24));
  info.fingerprint = get<uint64_t>(h, 32);
  // Compared by division: a damaged count times the width could wrap around.
  const uint64_t body = bytes - static_cast<uint64_t>(kTokenShardHeaderBytes);
  // A token takes its id's bytes, and one more for its loss-mask flag in version 2.
  const auto width = static_cast<uint64_t>(info.token_bytes) + (info.loss_mask ? 1 : 0);
  if (info.tokens < 0 || body % width != 0 || body / width != static_cast<uint64_t>(info.tokens)) {
    const uint64_t expected_bytes =
        static_cast<uint64_t>(kTokenShardHeaderBytes) + static_cast<uint64_t>(info.tokens) * width;
    refuse(path, "length",
           std::to_string(bytes) + " bytes, but its header says " + std::to_string(info.tokens) +
               " tokens of " + std::to_string(width) + " bytes (" + std::to_string(expected_bytes) +
               " bytes): truncated or damaged",
           {{"value", std::to_string(bytes)},
            {"expected", std::to_string(expected_bytes)},
            {"tokens", std::to_string(info.tokens)}});
  }
  if (info.token_bytes != token_bytes_for(info.vocab_size)) {
    refuse(path, "token_bytes",
           std::to_string(info.token_bytes) + " bytes per token for a vocabulary of " +
               std::to_string(info.vocab_size) + ", expected " +
               std::to_string(token_bytes_for(info.vocab_size)),
           {{"value", std::to_string(info.token_bytes)},
            {"expected", std::to_string(token_bytes_for(info.vocab_size))}});
  }
  if (expect.vocab_size && *expect.vocab_size != info.vocab_size) {
    refuse(path, "vocab_size",
           "a vocabulary of " + std::to_string(info.vocab_size) + ", expected " +
               std::to_string(*expect.vocab_size),
           {{"value", std::to_string(info.vocab_size)},
            {"expected", std::to_string(*expect.vocab_size)}});
  }
  if (expect.fingerprint && *expect.fingerprint != info.fingerprint) {
    refuse(path, "tokenizer",
           "written with tokenizer " + fingerprint_hex(info.fingerprint) + ", expected tokenizer " +
               fingerprint_hex(*expect.fingerprint),
           {{"value", fingerprint_hex(info.fingerprint)},
            {"expected", fingerprint_hex(*expect.fingerprint)}});
  }
  // Every id below the vocabulary (the tokenizer's, checked above where expected, and so the
  // model's): checked once here rather than per batch.
  const unsigned char* tokens = h + kTokenShardHeaderBytes;
  shard.max_token_ = info.token_bytes == 2 ? largest_id<uint16_t>(tokens, info.tokens)
                                           : largest_id<uint32_t>(tokens, info.tokens);
  if (info.tokens > 0 && shard.max_token_ >= info.vocab_size) {
    const int64_t at = info.token_bytes == 2
                           ? first_outside<uint16_t>(tokens, info.tokens, info.vocab_size)
                           : first_outside<uint32_t>(tokens, info.tokens, info.vocab_size);
    refuse(path, "token_id",
           "holds token id " + std::to_string(shard.max_token_) + ", outside the vocabulary of " +
               std::to_string(info.vocab_size) + " (the first id outside it is token " +
               std::to_string(at) + "): written for another vocabulary, or damaged",
           {{"token_id", std::to_string(shard.max_token_)},
            {"vocab_size", std::to_string(info.vocab_size)},
            {"position", std::to_string(at)}});
  }
  shard.mapping_ = std::move(mapping);
  return shard;
}

int64_t TokenShard::at(int64_t index) const {
  int64_t value = 0;
  read(index, 1, &value);
  return value;
}

void TokenShard::check_range(int64_t begin, int64_t count) const {
  if (begin < 0 || count < 0 || begin + count > info_.tokens) {
    throw DataError("token shard '" + path_ + "': tokens [" + std::to_string(begin) + ", " +
                    std::to_string(begin + count) + ") of " + std::to_string(info_.tokens));
  }
}

void TokenShard::read_counted(int64_t begin, int64_t count, uint8_t* out) const {
  check_range(begin, count);
  if (!info_.loss_mask) {
    std::memset(out, 1, static_cast<size_t>(count));
    return;
  }
  const unsigned char* mask = mapping_->data() + kTokenShardHeaderBytes +
                              static_cast<size_t>(info_.tokens) * info_.token_bytes;
  for (int64_t i = 0; i < count; ++i) out[i] = mask[begin + i] != 0;
}

void TokenShard::read(int64_t begin, int64_t count, int64_t* out) const {
  check_range(begin, count);
  const unsigned char* tokens = mapping_->data() + kTokenShardHeaderBytes;
  if (info_.token_bytes == 2) {
    for (int64_t i = 0; i < count; ++i) out[i] = get<uint16_t>(tokens, (begin + i) * 2);
  } else {
    for (int64_t i = 0; i < count; ++i) out[i] = get<uint32_t>(tokens, (begin + i) * 4);
  }
}

}  // namespace loom::data
