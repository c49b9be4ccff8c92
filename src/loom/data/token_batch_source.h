// Batches of a language model's training examples: windows of seq_len + 1 tokens from token
// shards (TokenWindows), as inputs int64 [B, seq_len] and the next tokens as targets int64
// [B, seq_len]. Batch `step` of `epoch` is a pure function of (seed, epoch, step), like an image
// loader's, so exact resume and rank shares work unchanged.
//
// A batch is a copy of B x (seq_len + 1) tokens out of memory-mapped shards (a few hundred
// microseconds for the batches a CPU trains on), made on the calling thread when asked: nothing
// to prefetch, no worker threads. Remote data workers (data.remote.workers) serve them too, for
// trainers on hosts that do not hold the shards. A short last batch is made only where asked for
// (evaluation's `drop_last = false`).
//
// Threading: batch() may be called from any thread; the counts are atomic.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "loom/data/batch_source.h"
#include "loom/data/token_windows.h"

namespace loom::data {

class TokenBatchSource : public LocalBatchSource {
 public:
  // Throws ConfigError naming data.batch_size when not one batch fits this rank's share.
  TokenBatchSource(std::shared_ptr<const TokenWindows> windows, int64_t batch_size,
                   bool drop_last = true);

  int64_t steps_per_epoch() const override { return steps_; }
  int64_t samples() const override { return windows_->total_windows(); }
  Batch batch(int64_t epoch, int64_t step) const override;
  Batch build_batch(int64_t epoch, int64_t step, LoaderStats* tally = nullptr) const override;
  BatchLayout layout() const override;  // int64 token ids [T], the next ones [T]
  LoaderState identity() const override;
  LoaderStats stats() const override;
  std::string describe_producers() const override;

  const TokenWindows& windows() const { return *windows_; }

 private:
  std::shared_ptr<const TokenWindows> windows_;
  int64_t batch_size_;
  int64_t steps_;
  mutable std::atomic<int64_t> samples_{0};
  mutable std::atomic<int64_t> build_nanoseconds_{0};
};

}  // namespace loom::data
