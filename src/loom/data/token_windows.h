// A language model's training examples from token shards: windows of seq_len + 1 tokens (the
// inputs, and the same shifted by one as the targets), at positions that are a pure function
// of (seed, epoch, index), so that exact resume, rank sharding and any number of producers see
// the same batches.
//
// Each epoch starts its windows at an offset of its own within [0, seq_len) (drawn from seed and
// epoch), so epochs see the text cut at different places; window j of a shard then starts at
// offset + j x seq_len. Every shard holds the same number of windows in every epoch,
// (tokens - seq_len) / seq_len, and the windows of all shards are visited in an EpochOrder
// (shuffled, shard(rank, world): disjoint shares, equal for every rank).
//
// Threading: read-only once made; any thread may call window() and batch().
#pragma once

#include <ATen/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "loom/data/epoch_order.h"
#include "loom/data/token_shard.h"

namespace loom::data {

class TokenWindows {
 public:
  // Throws ConfigError when no shard holds a window of `seq_len` + 1 tokens, and DataError naming
  // a shard whose vocabulary is not the first's (the model is made for one vocabulary).
  // `mode`: how the windows split into rank shares (kDrop for training; kExact evaluates every
  // window once over all ranks).
  TokenWindows(std::vector<TokenShard> shards, int64_t seq_len, uint64_t seed, int rank = 0,
               int world = 1, EpochOrder::ShardMode mode = EpochOrder::ShardMode::kDrop);

  // The shards `split`-NNNNN.tokens of a `loom data tokenize` folder, checked against the
  // folder's tokenizer.model (its vocabulary and fingerprint) and every id against that
  // vocabulary (TokenShard::open). Throws DataError naming the folder when it has none, or the
  // shard that does not belong.
  static TokenWindows open(const std::string& dir, const std::string& split, int64_t seq_len,
                           uint64_t seed, int rank = 0, int world = 1,
                           EpochOrder::ShardMode mode = EpochOrder::ShardMode::kDrop);

  // The paths of those shards, in order, without opening them. Throws DataError naming the
  // folder when it is missing or has no tokenizer.model or no such shard.
  static std::vector<std::string> shard_paths(const std::string& dir, const std::string& split);

  int64_t seq_len() const { return seq_len_; }
  int64_t size() const { return order_.size(); }  // this rank's windows an epoch
  int64_t total_windows() const { return order_.total(); }
  int64_t tokens() const { return tokens_; }  // in all shards
  int64_t vocab_size() const { return shards_.front().info().vocab_size; }
  uint64_t seed() const { return seed_; }
  int rank() const { return order_.rank(); }
  int world() const { return order_.world(); }
  size_t shard_count() const { return shards_.size(); }
  const std::vector<TokenShard>& shards() const { return shards_; }

  // Which window (of all ranks' windows) is at `position` of this rank's share of `epoch`.
  int64_t index_at(int64_t epoch, int64_t position) const {
    return order_.index_at(epoch, position);
  }
  // Window `position` of this rank's share of `epoch`: seq_len + 1 tokens into `out`, and
  // whether each counts as a target into `counted` where given (token_shard.h's loss mask).
  void window(int64_t epoch, int64_t position, int64_t* out, uint8_t* counted = nullptr) const;
  // Whether any shard has a loss mask (fine-tuning pairs): some targets then count in no loss.
  bool loss_masked() const { return loss_masked_; }
  // Windows [step x batch, (step + 1) x batch) of this rank's share, as int64 [batch, seq_len+1].
  at::Tensor batch(int64_t epoch, int64_t step, int64_t batch) const;
  // Where window `index` (of all ranks' windows) starts in `epoch`: its shard and first token.
  std::pair<int, int64_t> start_of(int64_t epoch, int64_t index) const;

 private:
  std::vector<TokenShard> shards_;
  std::vector<int64_t> first_window_;  // per shard: its first window's index
  int64_t seq_len_;
  uint64_t seed_;
  int64_t tokens_ = 0;
  bool loss_masked_ = false;
  EpochOrder order_;
};

}  // namespace loom::data
