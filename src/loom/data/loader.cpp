#include "loom/data/loader.h"

#include <ATen/Context.h>

#include <chrono>
#include <ctime>

#include "loom/core/batch_memory.h"
#include "loom/core/device.h"
#include "loom/core/error.h"
#include "loom/core/log.h"
#include "loom/core/rng.h"
#include "loom/core/thread_cpu_time.h"

namespace loom::data {
namespace {

// A batch that takes longer than this is a stuck decoder, not a slow one.
constexpr auto kBatchTimeout = std::chrono::seconds(300);
constexpr int kBadFilesLogged = 5;
// Replacements tried for one bad sample before giving up (each is bad with the data set's bad
// fraction, so eight in a row means the data is mostly bad).
constexpr int kSubstituteTries = 8;

}  // namespace

Loader::Loader(std::shared_ptr<const Dataset> dataset, EpochOrder order, LoaderOptions options)
    : dataset_(std::move(dataset)),
      order_(order),
      options_(std::move(options)),
      window_({batches_per_epoch(order_.size(), options_.batch_size, options_.drop_last),
               kBatchTimeout, options_.max_bad_fraction,
               [this](const OrderedWindow::Slot*) {  // called with window_'s lock held
                 return "waited for " + std::to_string(active_threads_) + " worker threads";
               }}) {
  if (order_.total() != dataset_->size()) {
    throw Error("loader: order covers " + std::to_string(order_.total()) +
                " samples, data set has " + std::to_string(dataset_->size()));
  }
  if (!options_.transforms) throw Error("loader: no transform pipeline given");
  if (options_.pin_memory && cuda_availability().devices == 0) {
    // Pinned memory is CUDA's: its allocator is torch's CUDA library's.
    throw Error("loader: pinned batches need a GPU, and " + cuda_availability().why_not,
                {{"problem", "no_cuda"}});
  }
  if (options_.threads < 1) throw ConfigError("config key 'data.workers': must be >= 1");
  steps_ = batches_per_epoch(order_.size(), options_.batch_size, options_.drop_last);
  depth_ = depth_for(options_.prefetch_batches);
  set_threads(options_.threads);
}

int Loader::depth_for(int64_t prefetch_batches) const {
  const int64_t by_bytes = std::max<int64_t>(1, options_.prefetch_bytes / batch_bytes());
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(prefetch_batches, by_bytes)));
}

void Loader::set_threads(int threads) {
  if (threads < 1) throw Error("loader: " + std::to_string(threads) + " threads asked for");
  window_.update([&] {
    active_threads_ = threads;
    // New workers wait for the lock like the others.
    while (static_cast<int>(workers_.size()) < threads) {
      const int index = static_cast<int>(workers_.size());
      workers_.emplace_back([this, index] { worker_loop(index); });
    }
  });
}

void Loader::set_prefetch_batches(int batches) {
  const int depth = depth_for(batches);
  window_.update([&] { depth_ = depth; });
}

int Loader::prefetch_depth() const {
  return window_.with_lock([&] { return depth_; });
}

int Loader::threads() const {
  return window_.with_lock([&] { return active_threads_; });
}

std::string Loader::describe_producers() const {
  return "the local loader (" + std::to_string(threads()) + " threads)";
}

Loader::~Loader() {
  window_.stop();
  for (auto& w : workers_) w.join();
}

int64_t Loader::batch_bytes() const {
  const TransformPipeline& t = *options_.transforms;
  return options_.batch_size * t.height() * t.width() * t.channels();
}

BatchLayout Loader::layout() const {
  const TransformPipeline& t = *options_.transforms;
  BatchLayout layout;
  layout.batch_size = options_.batch_size;
  layout.input_dims = {t.height(), t.width(), t.channels()};
  return layout;
}

LoaderStats Loader::stats() const { return window_.stats(); }

int Loader::ready_batches() const { return window_.ready(); }

void Loader::set_batch_observer(BatchObserver observer) {
  window_.with_lock([&] { observer_ = std::move(observer); });
}

LoaderState Loader::identity() const {
  LoaderState s;
  s.seed = options_.seed;
  s.samples = dataset_->size();
  s.steps_per_epoch = steps_;
  s.rank = order_.rank();
  s.world = order_.world();
  s.batch = options_.batch_size;
  return s;
}

void Loader::seek(int64_t epoch, int64_t step) const { window_.move_to(epoch, step); }

void Loader::set_epoch_limit(int64_t epochs) { window_.set_epoch_limit(epochs); }

Batch Loader::batch(int64_t epoch, int64_t step) const { return window_.take(epoch, step); }

void Loader::worker_loop(int index) const {
  const auto ahead = [&]() -> int64_t { return index < active_threads_ ? depth_ : 0; };
  while (const auto claim = window_.wait_claim(index, ahead)) {
    const BatchObserver observer = window_.with_lock([&] { return observer_; });
    Batch batch;
    std::exception_ptr error;
    LoaderStats counts;
    const auto begin = std::chrono::steady_clock::now();
    const double cpu_begin = thread_cpu_seconds();
    try {
      batch = build_batch(claim->epoch, claim->step, &counts);
    } catch (...) {
      error = std::current_exception();
    }
    const auto end = std::chrono::steady_clock::now();
    const double cpu = thread_cpu_seconds() - cpu_begin;
    if (observer) observer(claim->epoch, claim->step, begin, end, "");
    // Every build counts as the loader's time, a batch dropped after a seek as well.
    window_.deliver(*claim, index, std::move(batch), error, counts,
                    [&](BatchWindow::Delivery, LoaderStats& stats) {
                      stats.build_seconds += std::chrono::duration<double>(end - begin).count();
                      stats.cpu_seconds += cpu;
                    });
  }
}

void Loader::record_bad(const SampleError& e, LoaderStats* tally) const {
  if (tally) ++tally->bad[static_cast<size_t>(e.fault())];
  window_.with_lock([&] {
    if (logged_bad_ >= kBadFilesLogged) return;
    ++logged_bad_;
    const char* action = options_.policy == BadSamplePolicy::kSkip         ? "skipping"
                         : options_.policy == BadSamplePolicy::kSubstitute ? "replacing"
                                                                           : "stopping at";
    LOOM_LOG(kWarn, "data") << action << " a bad sample (" << fault_name(e.fault())
                            << "): " << e.what()
                            << (logged_bad_ == kBadFilesLogged ? " (further ones are only counted)"
                                                               : "");
  });
}

int64_t Loader::load_sample(int64_t epoch, int64_t index, at::Tensor image, int64_t& label,
                            LoaderStats* tally) const {
  const auto seed = options_.seed, e = static_cast<uint64_t>(epoch);
  for (uint64_t attempt = 0;; ++attempt) {
    // Replacements are drawn from the whole data set, keyed like everything else.
    const int64_t candidate =
        attempt == 0
            ? index
            : static_cast<int64_t>(hash_key({seed, e, static_cast<uint64_t>(index), attempt, 307}) %
                                   static_cast<uint64_t>(dataset_->size()));
    try {
      Sample sample = dataset_->read(candidate);
      KeyedRng rng(hash_key({seed, e, static_cast<uint64_t>(candidate), attempt, 211}));
      if (sample.pixels.defined()) {
        options_.transforms->run_pixels(sample.pixels, rng, image);
      } else {
        options_.transforms->run_encoded(sample.bytes, sample.key, options_.max_pixels, rng, image);
      }
      label = sample.label;
      return candidate;
    } catch (const SampleError& error) {
      record_bad(error, tally);
      if (options_.policy == BadSamplePolicy::kFail) throw;
      if (options_.policy == BadSamplePolicy::kSkip) return -1;
      if (attempt + 1 == kSubstituteTries) {
        throw DataError("loader: sample " + std::to_string(index) + " and " +
                        std::to_string(kSubstituteTries - 1) +
                        " replacements in a row were bad; last: " + error.what());
      }
    }
  }
}

Batch Loader::build_batch(int64_t epoch, int64_t step, LoaderStats* tally) const {
  const int64_t begin = step * options_.batch_size;
  const int64_t count = std::min(options_.batch_size, order_.size() - begin);
  const TransformPipeline& t = *options_.transforms;
  const std::vector<int64_t> shape = {count, t.height(), t.width(), t.channels()};
  at::Tensor images =
      options_.pin_memory
          ? at::empty(shape, at::TensorOptions().dtype(at::kByte).pinned_memory(true))
          : empty_batch_tensor(shape, at::kByte);
  at::Tensor labels = at::empty({count}, at::kLong), indices = at::empty({count}, at::kLong);
  auto* label_out = labels.data_ptr<int64_t>();
  auto* index_out = indices.data_ptr<int64_t>();
  int64_t filled = 0, substituted = 0;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t index = order_.index_at(epoch, begin + i);
    const int64_t used = load_sample(epoch, index, images[filled], label_out[filled], tally);
    if (used < 0) continue;
    substituted += used != index;
    index_out[filled++] = used;
  }
  if (tally) {
    tally->samples += count;
    tally->substituted += substituted;
  }
  if (filled == count) return {images, labels, indices};
  return {images.slice(0, 0, filled), labels.slice(0, 0, filled), indices.slice(0, 0, filled)};
}

}  // namespace loom::data
