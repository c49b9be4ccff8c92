// What the trainer draws batches from: batch `step` of `epoch`, always the same batch for the
// same arguments (which is what exact resume rests on). Implementations may prefetch on the
// assumption that steps are asked for in order (their prefetch state is internal, hence the
// const interface); any other order still returns the right batch.
#pragma once

#include <ATen/ATen.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "loom/data/loader_state.h"
#include "loom/data/remote/remote_worker_stats.h"

namespace loom::data {

// A batch as named tensors: what the model takes, what its loss compares the output with, and
// where each sample came from. The task decides their shapes: image classification has uint8
// pixels [B, H, W, C] and int64 labels [B]; causal language modelling has int64 token ids
// [B, T] and the ids that follow each of them [B, T].
struct Batch {
  at::Tensor inputs;
  at::Tensor targets;
  at::Tensor indices;  // int64 [B]: the data set index (or window) each sample came from
  int64_t size() const { return targets.defined() ? targets.size(0) : 0; }
};

// What a source has read so far; bad samples by SampleFault (unreadable, truncated,
// undecodable, too large). The counts are of the batches handed to the consumer (not of those
// prepared ahead); the times are of all the work done.
struct LoaderStats {
  int64_t samples = 0;           // batch positions filled or attempted
  std::array<int64_t, 4> bad{};  // by SampleFault
  int64_t substituted = 0;       // positions filled by a replacement
  // Loader threads building batches: wall time, and CPU time (the pipeline's cost per sample
  // is cpu_seconds / samples, whatever else runs on the cores).
  double build_seconds = 0;
  double cpu_seconds = 0;
  int64_t bad_total() const { return bad[0] + bad[1] + bad[2] + bad[3]; }
  // Adds another batch's sample counts (not its times).
  void add_counts(const LoaderStats& other) {
    samples += other.samples;
    for (size_t i = 0; i < bad.size(); ++i) bad[i] += other.bad[i];
    substituted += other.substituted;
  }
};

// Throws DataError with the counts by reason when more than `max_bad_fraction` of the samples
// seen were bad (judged from 200 samples on; fewer are too noisy).
void check_bad_fraction(const LoaderStats& seen, double max_bad_fraction);

// Batches in an epoch of `samples`: full batches only (drop_last), or with a short last one.
// Throws ConfigError naming data.batch_size when not even one batch fits.
int64_t batches_per_epoch(int64_t samples, int64_t batch_size, bool drop_last);

// Told, on the thread that built or fetched it, when a batch was made and how long it took;
// `origin` is "" for the trainer's own threads, or the remote data worker's address.
using BatchObserver =
    std::function<void(int64_t epoch, int64_t step, std::chrono::steady_clock::time_point begin,
                       std::chrono::steady_clock::time_point end, const std::string& origin)>;

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  virtual int64_t steps_per_epoch() const = 0;
  virtual int64_t samples() const = 0;  // in the underlying data set
  virtual Batch batch(int64_t epoch, int64_t step) const = 0;
  // What fixes the sequence of batches, at position (0, 0); see LoaderState.
  virtual LoaderState identity() const = 0;
  virtual LoaderStats stats() const = 0;
  // Batches prepared and waiting for the consumer now (0 for sources that do not prefetch).
  virtual int ready_batches() const { return 0; }
  // Set before the first batch() call; default: not observed.
  virtual void set_batch_observer(BatchObserver) {}
  // Starts preparing batches from (epoch, step), before the first batch() call asks for them.
  // Sources that prepare batches go on into the next epoch as the consumer nears an epoch's end.
  virtual void seek(int64_t /*epoch*/, int64_t /*step*/) const {}
  // Batches of epoch `epochs` and later are not prepared ahead (a test set read as epoch 0 again
  // and again, a run's last epoch); they are still built when asked for. Default: no limit.
  virtual void set_epoch_limit(int64_t /*epochs*/) {}
  // Worker threads and batches prepared ahead, changeable between batch() calls (the autotuner
  // does); they never change which batches come out. Sources without workers ignore them.
  virtual void set_threads(int /*threads*/) {}
  virtual void set_prefetch_batches(int /*batches*/) {}

  // Who builds the batches, for messages about a wait ("the local loader (2 threads)").
  virtual std::string describe_producers() const = 0;
  // Remote data workers feeding the source (data.remote.workers): each one's record, the batches
  // this process's own threads delivered, and the CPU time spent receiving and checking workers'
  // batches. A local source has no workers.
  virtual std::vector<RemoteWorkerStats> worker_stats() const { return {}; }
  virtual int64_t local_batches() const { return 0; }
  virtual double receive_cpu_seconds() const { return 0; }
};

// What every full batch of a source holds, for checking batches built elsewhere (a remote data
// worker's) before they are used.
struct BatchLayout {
  int64_t batch_size = 0;           // samples in a full batch
  std::vector<int64_t> input_dims;  // of one sample: pixels {H, W, C}, token ids {T}
  at::ScalarType input_dtype = at::kByte;
  std::vector<int64_t> target_dims;  // of one sample, int64: a label {}, the next tokens {T}
  int64_t bytes() const;             // of a full batch: inputs, targets and indices
};

// A source that builds its batches in this process, on any thread, on request: what
// `loom data-worker` serves, and what the local threads of a source fed by workers build.
class LocalBatchSource : public BatchSource {
 public:
  // Builds batch (epoch, step) on the calling thread, adding its sample counts to `tally` when
  // given; stats() counts only the batches batch() hands out.
  virtual Batch build_batch(int64_t epoch, int64_t step, LoaderStats* tally = nullptr) const = 0;
  virtual BatchLayout layout() const = 0;
};

}  // namespace loom::data
