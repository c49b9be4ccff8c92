#include "loom/data/remote/remote_batch_source.h"

#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>

#include <ctime>
#include <set>
#include <utility>

#include "loom/core/log.h"
#include "loom/core/thread_cpu_time.h"

namespace loom::data {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kBatchTimeout = std::chrono::seconds(300);  // as the local Loader
constexpr int kMaxLanesPerWorker = 16;
constexpr int kLocalProducerNice = 5;
constexpr const char* kLog = "data";

const char* state_name(int state) {
  static const char* names[] = {"connecting", "up", "down", "refused"};
  return names[state];
}

}  // namespace

RemoteBatchSource::RemoteBatchSource(std::unique_ptr<LocalBatchSource> local,
                                     RemoteSourceOptions options)
    : local_(std::move(local)),
      options_(std::move(options)),
      window_({local_->steps_per_epoch(), kBatchTimeout, options_.max_bad_fraction,
               [this](const BatchWindow::Slot* slot) -> std::string {  // window_'s lock held
                 if (!slot || slot->state == OrderedWindow::State::kWaiting) {
                   return "no producer took it";
                 }
                 if (slot->producer == kLocal) return "local threads were building it";
                 return "data worker " + remotes_[slot->producer].stats.address +
                        " was building it";
               }}) {
  shape_.layout = local_->layout();
  max_ahead_by_bytes_ = std::max<int64_t>(
      1, options_.max_inflight_bytes / std::max<int64_t>(1, shape_.layout.bytes()));
  local_threads_ = options_.local_threads;
  options_.connection.steps_per_epoch = local_->steps_per_epoch();
  options_.connection.samples = local_->samples();
  remotes_.resize(options_.workers.size());
  for (size_t w = 0; w < remotes_.size(); ++w) {
    remotes_[w].connection =
        std::make_unique<WorkerConnection>(options_.workers[w], options_.connection);
    remotes_[w].stats.address = options_.workers[w];
  }
  // A first round of connections before any batch is asked for, so the first batches already
  // spread over the workers; later ones join from connect_loop().
  for (size_t w = 0; w < remotes_.size(); ++w) try_connect(static_cast<int>(w));
  window_.with_lock([&] {
    for (int lane = 0; lane < std::max(options_.local_threads, options_.fallback_threads); ++lane) {
      threads_.emplace_back([this, lane] { local_lane(lane); });
    }
    threads_.emplace_back([this] { connect_loop(); });
  });
}

RemoteBatchSource::~RemoteBatchSource() {
  window_.stop();
  for (auto& r : remotes_) r.connection->close();
  for (auto& t : threads_) t.join();
}

void RemoteBatchSource::set_threads(int threads) {
  window_.update([&] {
    local_threads_ = threads;
    const int have = std::max(options_.local_threads, options_.fallback_threads);
    for (int lane = have; lane < threads; ++lane) {
      threads_.emplace_back([this, lane] { local_lane(lane); });
    }
    options_.local_threads = std::max(options_.local_threads, threads);
  });
}

void RemoteBatchSource::set_batch_observer(BatchObserver observer) {
  window_.with_lock([&] { observer_ = std::move(observer); });
}

LoaderStats RemoteBatchSource::stats() const { return window_.stats(); }

int RemoteBatchSource::ready_batches() const { return window_.ready(); }

std::string RemoteBatchSource::describe_producers() const {
  std::string workers;
  for (const auto& w : options_.workers) workers += (workers.empty() ? "" : ", ") + w;
  return "the remote data workers (" + workers + ") and local loader threads";
}

int64_t RemoteBatchSource::local_batches() const {
  return window_.with_lock([&] { return local_batches_; });
}

double RemoteBatchSource::receive_cpu_seconds() const {
  // gRPC 1.51 receives on its own threads (the callback queue's "nexting_thread", its executor,
  // event engine and timers); the fetching threads copy and check what arrived.
  static const std::set<std::string> kReceiving = {
      kFetchThreadName, "nexting_thread",  "default-executo", "event_engine",
      "timer_manager",  "grpc_global_tim", "resolver-execut"};
  return named_threads_cpu_seconds(
      [](const std::string& name) { return kReceiving.count(name) > 0; });
}

ErrorFields RemoteBatchSource::refusal_fields(int w) const {
  return window_.with_lock([&] {
    const Remote& r = remotes_.at(static_cast<size_t>(w));
    return r.state == WorkerState::kRefused ? r.refusal : ErrorFields{};
  });
}

std::vector<RemoteWorkerStats> RemoteBatchSource::worker_stats() const {
  return window_.with_lock([&] {
    std::vector<RemoteWorkerStats> out;
    const auto now = Clock::now();
    for (const auto& r : remotes_) {
      out.push_back(r.stats);
      out.back().state = state_name(static_cast<int>(r.state));
      if (r.state == WorkerState::kUp) {
        out.back().up_seconds += std::chrono::duration<double>(now - r.up_since).count();
      }
      if (r.ever_up) out.back().threads = r.connection->threads();
    }
    return out;
  });
}

void RemoteBatchSource::seek(int64_t epoch, int64_t step) const { window_.move_to(epoch, step); }

void RemoteBatchSource::set_epoch_limit(int64_t epochs) { window_.set_epoch_limit(epochs); }

Batch RemoteBatchSource::batch(int64_t epoch, int64_t step) const {
  return window_.take(epoch, step);
}

bool RemoteBatchSource::may_work(int producer, int lane) const {
  if (producer == kLocal) return lane < local_threads_ || workers_up_ == 0;
  const Remote& r = remotes_[static_cast<size_t>(producer)];
  return r.state == WorkerState::kUp && lane < r.lanes;
}

int64_t RemoteBatchSource::ahead_locked(int producer, int lane) const {
  if (!may_work(producer, lane)) return 0;
  int producers = std::max(local_threads_, options_.fallback_threads);
  for (const Remote& r : remotes_) producers += r.lanes;
  // Each producer may hold one step, and data.prefetch_batches more may wait for the trainer.
  return std::min<int64_t>(max_ahead_by_bytes_, producers + options_.prefetch_batches);
}

bool RemoteBatchSource::take_work(int producer, int lane, Work& work) {
  const auto claim = window_.wait_claim(producer, [&] { return ahead_locked(producer, lane); });
  if (claim) work = *claim;
  return claim.has_value();
}

void RemoteBatchSource::deliver(const Work& work, int producer, Batch batch,
                                std::exception_ptr error, const LoaderStats& tally) {
  using Delivery = BatchWindow::Delivery;
  const int64_t samples = batch.targets.defined() ? batch.targets.size(0) : 0;
  window_.deliver(work, producer, std::move(batch), error, tally,
                  [&](Delivery outcome, LoaderStats& stats) {
                    // Someone else was first: this answer is a duplicate (one for a step the
                    // trainer jumped away from is stale, and not counted).
                    if (outcome == Delivery::kDuplicate && producer != kLocal) {
                      ++remotes_[static_cast<size_t>(producer)].stats.duplicates;
                    }
                    if (outcome != Delivery::kStored) return;
                    if (producer == kLocal) {
                      // Only this host's threads count as the loader's time (summary
                      // loader_busy, the advisor's cost per sample); a worker's build time is
                      // its own host's.
                      stats.build_seconds += tally.build_seconds;
                      stats.cpu_seconds += tally.cpu_seconds;
                      ++local_batches_;
                    } else {
                      RemoteWorkerStats& worker = remotes_[static_cast<size_t>(producer)].stats;
                      ++worker.batches;
                      worker.samples += samples;
                    }
                  });
}

void RemoteBatchSource::local_lane(int lane) {
  // Local producers use the trainer host's spare CPU time: below the trainer's own threads in
  // the scheduler, so that feeding and computing are not slowed by building batches that the
  // workers could build as well (Pecan's "local cores first, but second to the trainer").
  ::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), kLocalProducerNice);
  ::pthread_setname_np(::pthread_self(), "loom-build");
  Work work;
  while (take_work(kLocal, lane, work)) {
    LoaderStats tally;
    Batch batch;
    std::exception_ptr error;
    const BatchObserver observer = window_.with_lock([&] { return observer_; });
    const auto begin = Clock::now();
    const double cpu_begin = thread_cpu_seconds();
    try {
      batch = local_->build_batch(work.epoch, work.step, &tally);
    } catch (...) {
      error = std::current_exception();
    }
    const auto end = Clock::now();
    tally.build_seconds = std::chrono::duration<double>(end - begin).count();
    tally.cpu_seconds = thread_cpu_seconds() - cpu_begin;
    if (observer) observer(work.epoch, work.step, begin, end, "");
    deliver(work, kLocal, std::move(batch), error, tally);
  }
}

void RemoteBatchSource::remote_lane(int w, int lane) {
  ::pthread_setname_np(::pthread_self(), kFetchThreadName);
  Remote& r = remotes_[static_cast<size_t>(w)];
  Work work;
  while (take_work(w, lane, work)) {
    BatchShape shape = shape_;
    shape.epoch = work.epoch;
    shape.step = work.step;
    LoaderStats tally;
    int64_t wire_bytes = 0;
    const auto begin = Clock::now();
    try {
      Batch batch = r.connection->fetch(shape, tally, wire_bytes);
      const auto end = Clock::now();
      const BatchObserver observer = window_.with_lock([&] {
        r.stats.bytes += wire_bytes;
        r.stats.request_seconds += std::chrono::duration<double>(end - begin).count();
        return observer_;
      });
      if (observer) observer(work.epoch, work.step, begin, end, r.stats.address);
      deliver(work, w, std::move(batch), nullptr, tally);
    } catch (const CorruptBatch& e) {
      window_.with_lock([&] {
        ++r.stats.crc_mismatches;
        r.stats.last_error = e.what();
      });
      LOOM_LOG(kWarn, kLog) << "data worker " << r.stats.address << ": " << e.what()
                            << "; asking again";
      window_.give_back(work, w);
    } catch (const WorkerUnavailable& e) {
      window_.give_back(work, w);
      mark_down(w, e.what());
    } catch (const Error&) {  // the data itself: the run stops as a local one would
      deliver(work, w, Batch{}, std::current_exception(), LoaderStats{});
    }
  }
}

void RemoteBatchSource::start_lanes_locked(int w) {
  if (window_.stopping()) return;  // the destructor is joining threads_
  Remote& r = remotes_[static_cast<size_t>(w)];
  // Two requests per build thread: one being built, one queued behind it, so the worker never
  // waits for this trainer (whose cores may be busy) to ask for the next batch.
  r.lanes = std::min(kMaxLanesPerWorker, 2 * r.connection->threads() + 1);
  for (; r.lanes_started < r.lanes; ++r.lanes_started) {
    const int lane = r.lanes_started;
    threads_.emplace_back([this, w, lane] { remote_lane(w, lane); });
  }
}

void RemoteBatchSource::try_connect(int w) {
  Remote& r = remotes_[static_cast<size_t>(w)];
  WorkerState state = WorkerState::kUp;
  std::string why;
  ErrorFields refusal;
  try {
    r.connection->open();
  } catch (const WorkerRefused& e) {
    state = WorkerState::kRefused;
    why = std::string("refused this trainer: ") + e.what();
    refusal = e.fields();
  } catch (const WorkerUnavailable& e) {
    state = WorkerState::kDown;
    why = e.what();
  }
  const bool up = window_.with_lock([&] {
    const WorkerState before = r.state;
    // A refusal needs a person to change something: ask again, but less often.
    const auto retry_every = options_.reconnect_every * (state == WorkerState::kRefused ? 10 : 1);
    r.next_try = Clock::now() + retry_every;
    if (state == WorkerState::kUp) {
      r.state = state;
      r.up_since = Clock::now();
      ++workers_up_;
      const bool rejoined = std::exchange(r.ever_up, true);
      start_lanes_locked(w);
      LOOM_LOG(kInfo, kLog) << "data worker " << r.stats.address
                            << (rejoined ? " is back" : " joined") << " ("
                            << r.connection->threads() << " build threads)";
      return true;
    }
    LOOM_LOG(kDebug, kLog) << "data worker " << r.stats.address << ": " << why;
    if (before != state || r.stats.last_error != why) {
      LOOM_LOG(kWarn, kLog) << "data worker " << r.stats.address << ": " << why
                            << "; trying again every " << retry_every.count() / 1000.0 << " s";
    }
    r.state = state;
    r.stats.last_error = why;
    r.refusal = std::move(refusal);
    return false;
  });
  if (up) window_.wake();  // its lanes may take steps now
}

void RemoteBatchSource::mark_down(int w, const std::string& why) {
  Remote& r = remotes_[static_cast<size_t>(w)];
  const bool went_down = window_.with_lock([&] {
    ++r.stats.failures;
    r.stats.last_error = why;
    if (r.state != WorkerState::kUp) return false;
    r.state = WorkerState::kDown;
    r.stats.up_seconds += std::chrono::duration<double>(Clock::now() - r.up_since).count();
    r.next_try = Clock::now() + options_.reconnect_every;
    --workers_up_;
    LOOM_LOG(kWarn, kLog) << "data worker " << r.stats.address << " failed: " << why
                          << "; its batches go to other producers"
                          << (workers_up_ == 0 ? " (no worker is up: local threads build them)"
                                               : "")
                          << "; trying again every " << options_.reconnect_every.count() / 1000.0
                          << " s";
    return true;
  });
  if (went_down) {
    r.connection->cancel_all();  // its other calls would only time out one by one
    window_.wake();              // fallback threads may work now
  }
}

void RemoteBatchSource::connect_loop() {
  while (!window_.stopped_within(std::chrono::milliseconds(200))) {
    for (size_t w = 0; w < remotes_.size() && !window_.stopping(); ++w) {
      const bool due = window_.with_lock([&] {
        const Remote& r = remotes_[w];
        return r.state != WorkerState::kUp && Clock::now() >= r.next_try;
      });
      if (due) try_connect(static_cast<int>(w));
    }
  }
}

}  // namespace loom::data
