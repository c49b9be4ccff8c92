#include "loom/data/epoch_order.h"

#include <string>

#include "loom/core/error.h"
#include "loom/core/rng.h"

namespace loom::data {

EpochOrder::EpochOrder(int64_t size, uint64_t seed, bool shuffle)
    : size_(size), seed_(seed), shuffle_(shuffle), shard_size_(size), half_bits_(1) {
  if (size <= 0)
    throw DataError("epoch order: data set is empty (size " + std::to_string(size) + ")");
  while ((uint64_t{1} << (2 * half_bits_)) < static_cast<uint64_t>(size)) ++half_bits_;
}

uint64_t EpochOrder::permute(uint64_t key, uint64_t x) const {
  // A balanced Feistel network is a bijection on 2*half_bits bits for any round function.
  const uint64_t mask = (uint64_t{1} << half_bits_) - 1;
  uint64_t left = x >> half_bits_, right = x & mask;
  for (uint64_t round = 0; round < 4; ++round) {
    uint64_t f = hash_key({key, round, right}) & mask;
    uint64_t next_right = left ^ f;
    left = right;
    right = next_right;
  }
  return (left << half_bits_) | right;
}

EpochOrder EpochOrder::shard(int rank, int world, ShardMode mode) const {
  if (world < 1 || rank < 0 || rank >= world) {
    throw Error("epoch order: rank " + std::to_string(rank) + " is outside a world of " +
                std::to_string(world));
  }
  EpochOrder out = *this;
  out.rank_ = rank;
  out.world_ = world;
  out.shard_size_ = mode == ShardMode::kDrop  ? size_ / world
                    : mode == ShardMode::kPad ? (size_ + world - 1) / world
                                              : (size_ - rank + world - 1) / world;
  if (out.shard_size_ == 0) {
    throw DataError("epoch order: " + std::to_string(size_) + " samples cannot give each of " +
                    std::to_string(world) + " ranks one sample");
  }
  return out;
}

int64_t EpochOrder::index_at(int64_t epoch, int64_t position) const {
  if (position < 0 || position >= shard_size_) {
    throw Error("epoch order: position " + std::to_string(position) + " is outside [0, " +
                std::to_string(shard_size_) + ")");
  }
  position = position * world_ + rank_;
  if (position >= size_) position -= size_;  // pad: the last round wraps to the epoch's start
  if (!shuffle_) return position;
  const uint64_t key = hash_key({seed_, static_cast<uint64_t>(epoch)});
  // Cycle walking: the domain is < 4x the size, so this takes under 4 steps on average.
  uint64_t x = static_cast<uint64_t>(position);
  do {
    x = permute(key, x);
  } while (x >= static_cast<uint64_t>(size_));
  return static_cast<int64_t>(x);
}

}  // namespace loom::data
