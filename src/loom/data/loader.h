// Reads, decodes and transforms samples on worker threads into uint8 NHWC batches, in order.
//
// Each batch is built by one worker as a pure function of (epoch, step): sample indices from
// the EpochOrder, transform randomness keyed by (seed, epoch, sample index). So the output is
// identical for any number of threads, and resuming at (epoch, step) needs nothing else.
// Workers run ahead of the consumer by at most `prefetch_batches` batches, fewer when that many
// would exceed `prefetch_bytes`, on into the next epoch (BatchWindow). Batch memory comes from
// LibTorch's CPU allocator, which Loom's caching allocator turns into reused slabs.
//
// Bad samples: under `skip` (default) a sample that cannot be read or decoded is counted by
// reason and left out of its batch (which comes out shorter); under `substitute` it is replaced
// by another sample chosen from (seed, epoch, index), so batches keep their size and every rank
// its step count; under `fail` it stops the run. In all cases the run fails when more than
// `max_bad_fraction` of the samples seen were bad. The first few bad files are logged.
//
// Threading: batch(), set_threads() and set_prefetch_batches() are called from one thread (the
// trainer); workers are internal and stop when the loader is destroyed. Fewer threads than
// were started leaves the others idle, not joined, so a later increase costs nothing.
#pragma once

#include <array>
#include <exception>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "loom/data/batch_source.h"
#include "loom/data/batch_window.h"
#include "loom/data/dataset.h"
#include "loom/data/epoch_order.h"
#include "loom/data/sample_error.h"
#include "loom/data/transform_pipeline.h"

namespace loom::data {

enum class BadSamplePolicy { kSkip, kSubstitute, kFail };

struct LoaderOptions {
  int64_t batch_size = 64;
  int threads = 2;
  int prefetch_batches = 4;
  int64_t prefetch_bytes = int64_t{512} << 20;
  bool drop_last = true;
  uint64_t seed = 0;
  std::shared_ptr<const TransformPipeline> transforms;  // required
  int64_t max_pixels = 0;                               // for encoded images; 0 = no limit
  BadSamplePolicy policy = BadSamplePolicy::kSkip;
  double max_bad_fraction = 0.01;
  // Batches in page-locked memory, for a Feeder on a CUDA device (copies from them can be
  // asynchronous). Needs a CUDA build of LibTorch; the constructor throws otherwise.
  bool pin_memory = false;
};

class Loader : public LocalBatchSource {
 public:
  Loader(std::shared_ptr<const Dataset> dataset, EpochOrder order, LoaderOptions options);
  ~Loader() override;

  int64_t steps_per_epoch() const override { return steps_; }
  int64_t samples() const override { return dataset_->size(); }
  Batch batch(int64_t epoch, int64_t step) const override;
  LoaderState identity() const override;
  void seek(int64_t epoch, int64_t step) const override;
  void set_epoch_limit(int64_t epochs) override;

  LoaderStats stats() const override;
  int ready_batches() const override;
  void set_batch_observer(BatchObserver observer) override;
  void set_threads(int threads) override;
  void set_prefetch_batches(int batches) override;
  // Batches prepared ahead at most: prefetch_batches, capped by prefetch_bytes.
  int prefetch_depth() const;
  int threads() const;
  std::string describe_producers() const override;
  int64_t batch_bytes() const;

  // Builds one batch on the calling thread (what a worker thread does, and a remote data worker
  // or another BatchSource's threads). Counts the batch's samples, bad samples and
  // substitutions in `tally` when given; stats() counts the batches batch() hands out.
  Batch build_batch(int64_t epoch, int64_t step, LoaderStats* tally = nullptr) const override;
  BatchLayout layout() const override;  // uint8 pixels [H, W, C], an int64 label
  const LoaderOptions& options() const { return options_; }

 private:
  void worker_loop(int index) const;
  // prefetch_batches capped by prefetch_bytes (at least 1).
  int depth_for(int64_t prefetch_batches) const;
  void record_bad(const SampleError& e, LoaderStats* tally) const;
  // Reads and transforms the sample at `index` into `image`, or under `substitute` a
  // replacement; returns the index used, or -1 when the sample is skipped.
  int64_t load_sample(int64_t epoch, int64_t index, at::Tensor image, int64_t& label,
                      LoaderStats* tally) const;

  std::shared_ptr<const Dataset> dataset_;
  EpochOrder order_;
  LoaderOptions options_;
  int64_t steps_ = 0;  // batches per epoch of this rank's share

  // Workers claim batches in it (producer = worker index); it guards the members below.
  mutable BatchWindow window_;
  int depth_ = 1;           // batches prepared ahead at most
  int active_threads_ = 1;  // workers with an index below this build batches
  mutable int logged_bad_ = 0;
  BatchObserver observer_;
  std::vector<std::thread> workers_;
};

}  // namespace loom::data
