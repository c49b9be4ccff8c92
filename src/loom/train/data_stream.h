// The training batches a configuration describes, in order, as model input, for training loops
// that are not Loom's own: the Python package's `loom.data.Loader`, and C++ programs that embed
// Loom. It is the trainer's data path (the same loaders, remote data workers, feeder) with a
// cursor: it knows the next batch (epoch, step), so a loop can save that position and resume
// mid-epoch onto the identical sequence of batches.
//
// Epochs: next() returns the batches of the current epoch in order, then one "end of epoch"
// (nullopt), after which the stream stands at step 0 of the next epoch. A caller that wants a
// particular epoch says so with set_epoch().
//
// Threading: one thread calls the methods (the loader's own threads are internal). next() may
// block while batches are built; it holds no Loom lock while it waits, so a caller may release
// its own (Python's GIL) around it.
#pragma once

#include <ATen/ATen.h>

#include <memory>
#include <optional>
#include <string>

#include "loom/core/config.h"
#include "loom/data/batch_source.h"
#include "loom/data/feeder.h"
#include "loom/data/loader_state.h"

namespace loom::train {

struct DataStreamOptions {
  int rank = 0, world = 1;            // this process's share of every epoch (data.shard)
  std::string device = "cpu";         // cpu, cuda, cuda:N (batches are pinned for CUDA)
  at::ScalarType dtype = at::kFloat;  // of normalised images: float, bfloat16 or half
  bool channels_last = false;         // memory layout of normalised images
  // false: images stay as the loader makes them, uint8 [B, H, W, C], moved to `device`.
  bool normalize = true;  // (token ids are never converted)
  int usable_cores = 0;  // sizes auto loader threads (data.workers: auto); 0: detect
};

struct StreamBatch {
  // Images: [B, C, H, W] of dtype (or uint8 [B, H, W, C] when not normalised); tokens: int64
  // ids [B, seq_len].
  at::Tensor inputs;
  at::Tensor targets;  // int64 labels [B], or the next tokens [B, seq_len]
  int64_t epoch = 0, step = 0;
};

class DataStream {
 public:
  // Opens the data sets and starts the loader threads at (0, 0). Throws ConfigError naming the
  // key for bad options, DataError naming the path for missing data.
  DataStream(const Config& config, DataStreamOptions options);
  ~DataStream();
  DataStream(const DataStream&) = delete;
  DataStream& operator=(const DataStream&) = delete;

  // The batch at the cursor, or nullopt at the end of the epoch (the cursor then moves to the
  // next epoch's first batch). Batches may be shorter than data.batch_size when bad samples are
  // skipped.
  std::optional<StreamBatch> next();

  int64_t steps_per_epoch() const { return source_->steps_per_epoch(); }
  int64_t epoch() const { return epoch_; }
  int64_t step() const { return step_; }
  // Moves to step 0 of `epoch`, unless the stream already stands in that epoch: a loop that
  // calls set_epoch(e) at the top of every epoch then keeps a position restored mid-epoch.
  void set_epoch(int64_t epoch);

  // The cursor and everything that fixes the sequence of batches (an epoch's end reads as the
  // next epoch's step 0).
  data::LoaderState state() const;
  // Continues from `saved` after checking that it belongs to this sequence (same seed, data
  // set size, shard, batches per epoch); throws DataError naming what differs.
  void restore(const data::LoaderState& saved);

  data::LoaderStats stats() const { return source_->stats(); }
  const data::BatchSource& source() const { return *source_; }
  data::BatchSource& source() { return *source_; }
  int loader_threads() const { return loader_threads_; }
  bool decodes() const { return decodes_; }  // encoded images (not pixels held in memory)
  // Token windows: tokens per sample (data.seq_len); 0 for images.
  int64_t tokens_per_sample() const { return tokens_per_sample_; }
  const data::ChannelStats& channel_stats() const { return channel_stats_; }

 private:
  StreamBatch to_output(data::Batch batch) const;

  DataStreamOptions options_;
  std::unique_ptr<data::BatchSource> source_;
  data::ChannelStats channel_stats_;
  at::Device device_;
  std::unique_ptr<data::Feeder> feeder_;  // null when not normalising
  int64_t epoch_ = 0, step_ = 0;
  int loader_threads_ = 1;
  bool decodes_ = false;
  int64_t tokens_per_sample_ = 0;
};

// Parses "float32", "bfloat16" or "float16" (and their short names); throws ConfigError naming
// `key` otherwise.
at::ScalarType parse_stream_dtype(const std::string& text, const std::string& key);

}  // namespace loom::train
