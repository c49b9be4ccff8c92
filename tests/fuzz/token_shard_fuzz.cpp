// The token shard reader: a language model's training data comes from disk, perhaps from another
// machine. A malformed shard must be a DataError naming it; an accepted one must be readable in
// full, its size matching its header, and the same tokens again once written back.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
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

}  // namespace

LOOM_FUZZ_TARGET(token_shard) {
  const std::string path = write_input(data, size, ".tokens");
  try {
    const loom::data::TokenShard shard = loom::data::TokenShard::open(path);
    const loom::data::TokenShardInfo& info = shard.info();
    if (64 + static_cast<uint64_t>(shard.size()) * info.token_bytes != size) {
      loom::fuzz::broken("an accepted shard's size does not match its header");
    }
    std::vector<int64_t> tokens(static_cast<size_t>(shard.size()));
    shard.read(0, shard.size(), tokens.data());
    // Tokens inside the vocabulary write back to the same bytes.
    bool in_range = true;
    std::vector<int32_t> narrow;
    for (const int64_t t : tokens) {
      in_range = in_range && t < info.vocab_size;
      narrow.push_back(static_cast<int32_t>(t));
    }
    if (in_range) {
      const std::string again = path + ".again";
      loom::data::write_token_shard(again, narrow, info.vocab_size, info.fingerprint);
      const loom::data::TokenShard back = loom::data::TokenShard::open(again);
      std::vector<int64_t> reread(tokens.size());
      back.read(0, back.size(), reread.data());
      std::remove(again.c_str());
      if (reread != tokens) loom::fuzz::broken("writing a shard back changed its tokens");
    }
  } catch (const loom::DataError&) {
  }
  std::remove(path.c_str());
}
