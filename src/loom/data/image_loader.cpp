#include "loom/data/image_loader.h"

#include <chrono>

#include "loom/core/error.h"
#include "loom/core/log.h"
#include "loom/core/rng.h"

namespace loom::data {
namespace {

// A batch that takes longer than this is a stuck decoder, not a slow one.
constexpr auto kBatchTimeout = std::chrono::seconds(300);
// Below this many samples the bad fraction is too noisy to judge.
constexpr int64_t kMinSamplesForBadFraction = 200;
constexpr int kBadFilesLogged = 5;

}  // namespace

ImageLoader::ImageLoader(std::shared_ptr<const Dataset> dataset, EpochOrder order,
                         LoaderOptions options)
    : dataset_(std::move(dataset)), order_(order), options_(std::move(options)) {
  if (order_.total() != dataset_->size()) {
    throw Error("loader: order covers " + std::to_string(order_.total()) +
                " samples, data set has " + std::to_string(dataset_->size()));
  }
  if (options_.threads < 1) throw ConfigError("config key 'data.workers': must be >= 1");
  steps_ = batches_per_epoch(order_.size(), options_.batch_size, options_.drop_last);
  for (int t = 0; t < options_.threads; ++t) workers_.emplace_back([this] { worker_loop(); });
}

ImageLoader::~ImageLoader() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  for (auto& w : workers_) w.join();
}

LoaderStats ImageLoader::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void ImageLoader::restart_at(int64_t epoch, int64_t step) const {
  epoch_ = epoch;
  next_to_build_ = next_to_take_ = step;
  ready_.clear();
  ++generation_;
}

Batch ImageLoader::batch(int64_t epoch, int64_t step) const {
  if (step < 0 || step >= steps_per_epoch()) {
    throw Error("loader: step " + std::to_string(step) + " is outside the epoch's " +
                std::to_string(steps_per_epoch()) + " steps");
  }
  std::unique_lock<std::mutex> lock(mutex_);
  if (epoch != epoch_ || step != next_to_take_) restart_at(epoch, step);
  changed_.notify_all();
  if (!changed_.wait_for(lock, kBatchTimeout, [&] { return ready_.count(step) > 0; })) {
    throw TimeoutError("loader: batch " + std::to_string(step) + " of epoch " +
                       std::to_string(epoch + 1) + " not ready after " +
                       std::to_string(kBatchTimeout.count()) + " s; waited for " +
                       std::to_string(options_.threads) + " worker threads");
  }
  Slot slot = std::move(ready_[step]);
  ready_.erase(step);
  next_to_take_ = step + 1;
  const LoaderStats seen = stats_;
  lock.unlock();
  changed_.notify_all();

  if (slot.error) std::rethrow_exception(slot.error);
  if (seen.samples >= kMinSamplesForBadFraction &&
      static_cast<double>(seen.bad_total()) > options_.max_bad_fraction * seen.samples) {
    throw DataError(
        "loader: " + std::to_string(seen.bad_total()) + " of " + std::to_string(seen.samples) +
        " samples were bad (unreadable " + std::to_string(seen.bad[0]) + ", truncated " +
        std::to_string(seen.bad[1]) + ", undecodable " + std::to_string(seen.bad[2]) +
        ", too large " + std::to_string(seen.bad[3]) +
        "), more than data.max_bad_fraction = " + std::to_string(options_.max_bad_fraction));
  }
  return slot.batch;
}

void ImageLoader::worker_loop() const {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    changed_.wait(lock, [&] {
      return stopping_ || (epoch_ >= 0 && next_to_build_ < steps_per_epoch() &&
                           next_to_build_ < next_to_take_ + options_.prefetch_batches);
    });
    if (stopping_) return;
    const int64_t epoch = epoch_, step = next_to_build_++;
    const uint64_t generation = generation_;
    lock.unlock();
    Slot slot;
    try {
      slot.batch = build_batch(epoch, step);
    } catch (...) {
      slot.error = std::current_exception();
    }
    lock.lock();
    if (generation == generation_) {
      ready_[step] = std::move(slot);
      changed_.notify_all();
    }
  }
}

void ImageLoader::record_bad(const SampleError& e) const {
  std::lock_guard<std::mutex> lock(mutex_);
  ++stats_.bad[static_cast<size_t>(e.fault())];
  if (logged_bad_ < kBadFilesLogged) {
    ++logged_bad_;
    LOOM_LOG(kWarn, "data") << "skipping a bad sample (" << fault_name(e.fault())
                            << "): " << e.what()
                            << (logged_bad_ == kBadFilesLogged ? " (further ones are only counted)"
                                                               : "");
  }
}

Batch ImageLoader::build_batch(int64_t epoch, int64_t step) const {
  const int64_t begin = step * options_.batch_size;
  const int64_t count = std::min(options_.batch_size, order_.size() - begin);
  const int64_t side = options_.transform.crop.size;
  at::Tensor images = at::empty({count, side, side, 3}, at::kByte);
  at::Tensor labels = at::empty({count}, at::kLong);
  auto* label_out = labels.data_ptr<int64_t>();
  int64_t filled = 0;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t index = order_.index_at(epoch, begin + i);
    try {
      Sample sample = dataset_->read(index);
      KeyedRng rng(hash_key(
          {options_.seed, static_cast<uint64_t>(epoch), static_cast<uint64_t>(index), 211}));
      decode_transformed(sample.bytes, sample.key, options_.transform, rng, images[filled]);
      label_out[filled++] = sample.label;
    } catch (const SampleError& e) {
      record_bad(e);
      if (options_.policy == BadSamplePolicy::kFail) throw;
    }
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.samples += count;
  }
  if (filled < count) return {images.slice(0, 0, filled), labels.slice(0, 0, filled)};
  return {images, labels};
}

}  // namespace loom::data
