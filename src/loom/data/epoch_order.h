// The order samples are visited in: position p of epoch e maps to a sample index through a
// keyed bijection (a Feistel network with cycle walking), so the order is a pure function of
// (seed, epoch, position) and resuming needs only two integers of state.
#pragma once

#include <cstdint>

namespace loom::data {

class EpochOrder {
 public:
  // `size` samples; shuffle=false visits them in index order.
  EpochOrder(int64_t size, uint64_t seed, bool shuffle = true);

  int64_t size() const { return size_; }

  // The sample index at `position` (0 <= position < size) of `epoch`.
  int64_t index_at(int64_t epoch, int64_t position) const;

 private:
  uint64_t permute(uint64_t key, uint64_t x) const;

  int64_t size_;
  uint64_t seed_;
  bool shuffle_;
  int half_bits_;  // the permutation acts on [0, 2^(2*half_bits)) and walks back into range
};

}  // namespace loom::data
