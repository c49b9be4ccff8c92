// The token shard reader: a language model's training data comes from disk, perhaps from another
// machine. A malformed shard must be a DataError naming it (one with an id outside its
// vocabulary naming the id and the vocabulary); an accepted one must be readable in full, its
// size matching its header, every id inside its vocabulary, and the same tokens again once
// written back.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "fuzz_target.h"
#include "loom/core/error.h"
#include "loom/data/token_shard.h"

namespace {

// A file of this process's own for the input (the reader maps files).
std::string write_input(const uint8_t* data, size_t size, const char* suffix) {
  const std::string path = "/tmp/loom-fuzz-token-shard-" + std::to_string(::getpid()) + suffix;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) loom::fuzz::broken("cannot write the input file");
  if (size > 0 && std::fwrite(data, 1, size, f) != size) loom::fuzz::broken("short write");
  std::fclose(f);
  return path;
}

// A shard refused for an id outside its vocabulary names the file, the id and the vocabulary,
// and the id is one the vocabulary lacks.
void check_id_refusal(const loom::DataError& e, const std::string& path) {
  const std::string id = e.field("token_id");
  if (id.empty()) return;  // refused for something else
  if (e.field("path") != path) loom::fuzz::broken("an id refusal does not name the shard");
  const std::string vocab = e.field("vocab_size");
  if (vocab.empty()) loom::fuzz::broken("an id refusal does not give the vocabulary size");
  if (std::strtoll(id.c_str(), nullptr, 10) < std::strtoll(vocab.c_str(), nullptr, 10)) {
    loom::fuzz::broken("a shard was refused for an id inside its vocabulary");
  }
}

}  // namespace

LOOM_FUZZ_TARGET(token_shard) {
  const std::string path = write_input(data, size, ".tokens");
  std::optional<loom::data::TokenShard> opened;
  try {
    opened = loom::data::TokenShard::open(path);
  } catch (const loom::DataError& e) {
    check_id_refusal(e, path);
  }
  if (opened) {
    const loom::data::TokenShard& shard = *opened;
    const loom::data::TokenShardInfo& info = shard.info();
    if (64 + static_cast<uint64_t>(shard.size()) * info.token_bytes != size) {
      loom::fuzz::broken("an accepted shard's size does not match its header");
    }
    std::vector<int64_t> tokens(static_cast<size_t>(shard.size()));
    shard.read(0, shard.size(), tokens.data());
    // Every id of an accepted shard is inside its vocabulary, the largest as open() found it.
    int64_t largest = -1;
    for (const int64_t t : tokens) {
      if (t < 0 || t >= info.vocab_size) {
        loom::fuzz::broken("an accepted shard holds an id outside its vocabulary");
      }
      largest = std::max(largest, t);
    }
    if (largest != shard.max_token()) loom::fuzz::broken("max_token() is not the largest id");
    // Written back (where the ids fit the writer's int32), the same tokens again.
    if (info.vocab_size <= int64_t{1} << 31) {
      const std::vector<int32_t> narrow(tokens.begin(), tokens.end());
      const std::string again = path + ".again";
      loom::data::write_token_shard(again, narrow, info.vocab_size, info.fingerprint);
      const loom::data::TokenShard back = loom::data::TokenShard::open(again);
      std::vector<int64_t> reread(tokens.size());
      back.read(0, back.size(), reread.data());
      std::remove(again.c_str());
      if (reread != tokens) loom::fuzz::broken("writing a shard back changed its tokens");
    }
  }
  std::remove(path.c_str());
}
