#include "loom/data/token_batch_source.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "loom/core/error.h"
#include "loom/core/ignored_target.h"

namespace loom::data {

TokenBatchSource::TokenBatchSource(std::shared_ptr<const TokenWindows> windows, int64_t batch_size,
                                   bool drop_last)
    : windows_(std::move(windows)),
      batch_size_(batch_size),
      steps_(batches_per_epoch(windows_->size(), batch_size, drop_last)) {}

Batch TokenBatchSource::batch(int64_t epoch, int64_t step) const {
  const auto begin = std::chrono::steady_clock::now();
  Batch batch = build_batch(epoch, step);
  samples_ += batch.size();
  build_nanoseconds_ +=
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - begin)
          .count();
  return batch;
}

Batch TokenBatchSource::build_batch(int64_t epoch, int64_t step, LoaderStats* tally) const {
  if (step < 0 || step >= steps_) {
    throw DataError("token batches: step " + std::to_string(step) + " is outside an epoch of " +
                    std::to_string(steps_));
  }
  const int64_t first = step * batch_size_;
  const int64_t count = std::min(batch_size_, windows_->size() - first);
  const int64_t span = windows_->seq_len() + 1;
  at::Tensor rows = at::empty({count, span}, at::kLong);
  at::Tensor indices = at::empty({count}, at::kLong);
  int64_t* out = rows.data_ptr<int64_t>();
  int64_t* index = indices.data_ptr<int64_t>();
  const bool masked = windows_->loss_masked();
  std::vector<uint8_t> counted(masked ? static_cast<size_t>(count * span) : 0);
  for (int64_t b = 0; b < count; ++b) {
    windows_->window(epoch, first + b, out + b * span, masked ? &counted[b * span] : nullptr);
    index[b] = windows_->index_at(epoch, first + b);
  }
  Batch batch;
  batch.inputs = rows.narrow(1, 0, span - 1).contiguous();
  batch.targets = rows.narrow(1, 1, span - 1).contiguous();
  if (masked) {
    // A target that does not count (a prompt's next token) is kIgnoredTarget; its input stays.
    int64_t* target = batch.targets.data_ptr<int64_t>();
    for (int64_t b = 0; b < count; ++b) {
      for (int64_t t = 0; t + 1 < span; ++t) {
        if (!counted[b * span + t + 1]) target[b * (span - 1) + t] = kIgnoredTarget;
      }
    }
  }
  batch.indices = indices;
  if (tally) tally->samples += count;
  return batch;
}

BatchLayout TokenBatchSource::layout() const {
  BatchLayout layout;
  layout.batch_size = batch_size_;
  layout.input_dims = layout.target_dims = {windows_->seq_len()};
  layout.input_dtype = at::kLong;
  return layout;
}

LoaderState TokenBatchSource::identity() const {
  LoaderState s;
  s.seed = windows_->seed();
  s.samples = windows_->total_windows();
  s.steps_per_epoch = steps_;
  s.rank = windows_->rank();
  s.world = windows_->world();
  s.batch = batch_size_;
  return s;
}

LoaderStats TokenBatchSource::stats() const {
  LoaderStats s;
  s.samples = samples_.load();
  // Built on the trainer's own thread: wall and CPU time are the same.
  s.build_seconds = s.cpu_seconds = static_cast<double>(build_nanoseconds_.load()) * 1e-9;
  return s;
}

std::string TokenBatchSource::describe_producers() const {
  return "token windows read from " + std::to_string(windows_->shard_count()) +
         " memory-mapped shard(s) on the training thread";
}

}  // namespace loom::data
