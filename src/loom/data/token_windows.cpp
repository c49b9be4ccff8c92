#include "loom/data/token_windows.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <filesystem>

#include "loom/core/error.h"
#include "loom/core/rng.h"
#include "loom/data/tokenizer.h"

namespace loom::data {
namespace {

// Windows a shard of `tokens` holds whatever the epoch's offset.
int64_t windows_in(int64_t tokens, int64_t seq_len) {
  return tokens > seq_len ? (tokens - seq_len) / seq_len : 0;
}

int64_t count_windows(const std::vector<TokenShard>& shards, int64_t seq_len) {
  if (seq_len < 1) {
    throw ConfigError("config key 'data.seq_len': " + std::to_string(seq_len) + " tokens");
  }
  int64_t total = 0;
  for (const TokenShard& s : shards) total += windows_in(s.size(), seq_len);
  if (total == 0) {
    throw ConfigError("config key 'data.seq_len': no token shard holds a window of " +
                      std::to_string(seq_len + 1) + " tokens");
  }
  return total;
}

}  // namespace

TokenWindows::TokenWindows(std::vector<TokenShard> shards, int64_t seq_len, uint64_t seed, int rank,
                           int world, EpochOrder::ShardMode mode)
    : shards_(std::move(shards)),
      seq_len_(seq_len),
      seed_(seed),
      order_(EpochOrder(count_windows(shards_, seq_len), seed).shard(rank, world, mode)) {
  int64_t first = 0;
  for (const TokenShard& s : shards_) {
    // Each shard's ids were checked against its own vocabulary when it was opened; the model is
    // made for the first's, so every shard must have that one.
    if (s.info().vocab_size != vocab_size()) {
      throw DataError("token shard '" + s.path() + "': a vocabulary of " +
                          std::to_string(s.info().vocab_size) + ", but '" + shards_.front().path() +
                          "' has " + std::to_string(vocab_size()),
                      {{"path", s.path()},
                       {"problem", "vocab_size"},
                       {"vocab_size", std::to_string(s.info().vocab_size)},
                       {"expected", std::to_string(vocab_size())}});
    }
    first_window_.push_back(first);
    first += windows_in(s.size(), seq_len_);
    tokens_ += s.size();
    loss_masked_ = loss_masked_ || s.info().loss_mask;
  }
}

std::vector<std::string> TokenWindows::shard_paths(const std::string& dir,
                                                   const std::string& split) {
  if (!std::filesystem::is_directory(dir)) {
    throw DataError("token data folder '" + dir +
                        "' does not exist or is not a directory (make one with loom data tokenize)",
                    {{"path", dir}, {"problem", "missing"}});
  }
  if (tokenizer_file_in(dir).empty()) {
    throw DataError("token data '" + dir +
                        "': no tokenizer.model or tokenizer.json (made by loom data tokenize)",
                    {{"path", dir}, {"problem", "tokenizer"}});
  }
  std::vector<std::string> paths;
  const std::string prefix = split + "-";
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) == 0 && entry.path().extension() == ".tokens") {
      paths.push_back(entry.path().string());
    }
  }
  if (paths.empty()) {
    throw DataError("token data '" + dir + "': no " + split + "-NNNNN.tokens shards",
                    {{"path", dir}, {"problem", "no_shards"}, {"split", split}});
  }
  std::sort(paths.begin(), paths.end());
  return paths;
}

TokenWindows TokenWindows::open(const std::string& dir, const std::string& split, int64_t seq_len,
                                uint64_t seed, int rank, int world, EpochOrder::ShardMode mode) {
  const std::vector<std::string> paths = shard_paths(dir, split);
  const Tokenizer tokenizer = Tokenizer::load(tokenizer_file_in(dir));
  std::vector<TokenShard> shards;
  const TokenShard::Expect expect{tokenizer.vocab_size(), tokenizer.fingerprint()};
  for (const std::string& path : paths) shards.push_back(TokenShard::open(path, expect));
  return TokenWindows(std::move(shards), seq_len, seed, rank, world, mode);
}

std::pair<int, int64_t> TokenWindows::start_of(int64_t epoch, int64_t index) const {
  // The last shard whose first window is at or before `index`.
  const auto it = std::upper_bound(first_window_.begin(), first_window_.end(), index);
  const auto shard = static_cast<int>(it - first_window_.begin()) - 1;
  const auto offset =
      static_cast<int64_t>(hash_key({seed_, static_cast<uint64_t>(epoch), 0x746f6b656e73ull}) %
                           static_cast<uint64_t>(seq_len_));
  return {shard, offset + (index - first_window_[static_cast<size_t>(shard)]) * seq_len_};
}

void TokenWindows::window(int64_t epoch, int64_t position, int64_t* out, uint8_t* counted) const {
  const auto [shard, start] = start_of(epoch, order_.index_at(epoch, position));
  shards_[static_cast<size_t>(shard)].read(start, seq_len_ + 1, out);
  if (counted) shards_[static_cast<size_t>(shard)].read_counted(start, seq_len_ + 1, counted);
}

at::Tensor TokenWindows::batch(int64_t epoch, int64_t step, int64_t batch) const {
  if ((step + 1) * batch > size()) {
    throw DataError("token windows: batch " + std::to_string(step) + " of " +
                    std::to_string(batch) + " windows is past the epoch's " +
                    std::to_string(size()));
  }
  at::Tensor out = at::empty({batch, seq_len_ + 1}, at::kLong);
  int64_t* rows = out.data_ptr<int64_t>();
  for (int64_t b = 0; b < batch; ++b) window(epoch, step * batch + b, rows + b * (seq_len_ + 1));
  return out;
}

}  // namespace loom::data
