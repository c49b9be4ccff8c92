// The order samples are visited in: position p of epoch e maps to a sample index through a
// keyed bijection (a Feistel network with cycle walking), so the order is a pure function of
// (seed, epoch, position) and resuming needs only two integers of state.
//
// shard(rank, world) gives one rank's part of every epoch: positions rank, rank + world, ... of
// the whole order. Ranks' parts are disjoint. For training every rank gets the same number of
// samples: `drop` leaves out the last N mod world positions, `pad` wraps around to the start of
// the epoch to fill the last round (repeating at most world - 1 samples). For evaluation `exact`
// visits every sample once over all ranks, whose parts then differ by at most one sample.
#pragma once

#include <cstdint>

namespace loom::data {

class EpochOrder {
 public:
  // `size` samples; shuffle=false visits them in index order.
  EpochOrder(int64_t size, uint64_t seed, bool shuffle = true);

  enum class ShardMode { kDrop, kPad, kExact };
  EpochOrder shard(int rank, int world, ShardMode mode) const;

  // Positions per epoch (this rank's, when sharded).
  int64_t size() const { return shard_size_; }
  // Samples in the data set the order permutes.
  int64_t total() const { return size_; }
  int rank() const { return rank_; }
  int world() const { return world_; }

  // The sample index at `position` (0 <= position < size()) of `epoch`.
  int64_t index_at(int64_t epoch, int64_t position) const;

 private:
  uint64_t permute(uint64_t key, uint64_t x) const;

  int64_t size_;
  uint64_t seed_;
  bool shuffle_;
  int rank_ = 0, world_ = 1;
  int64_t shard_size_;
  int half_bits_;  // the permutation acts on [0, 2^(2*half_bits)) and walks back into range
};

}  // namespace loom::data
